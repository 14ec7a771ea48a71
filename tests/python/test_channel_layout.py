"""The call channel's layout is defined once, in server/call_channel_layout.h;
client/kiln/channel_layout.py mirrors its numbers. This test reads the
header and fails when the two disagree, or when the header gains a constant
the mirror does not account for."""
import re
from pathlib import Path

from kiln import channel_layout

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "server" / "call_channel_layout.h"

# Header constant -> its name in channel_layout.py.
MIRRORED = {
    "kChannelIdle": "STATE_IDLE",
    "kChannelRequest": "STATE_REQUEST",
    "kChannelRunning": "STATE_RUNNING",
    "kChannelReply": "STATE_REPLY",
    "kChannelMagic": "MAGIC",
    "kChannelLayoutVersion": "LAYOUT_VERSION",
    "kChannelStateOffset": "_STATE",
    "kChannelClosedOffset": "_CLOSED",
    "kChannelMagicOffset": "_MAGIC",
    "kChannelVersionOffset": "_VERSION",
    "kRequestSeqOffset": "_REQ_SEQ",
    "kRequestHandleOffset": "_REQ_HANDLE",
    "kRequestInputsOffset": "_REQ_INPUTS",
    "kRequestOutputsOffset": "_REQ_OUTPUTS",
    "kRequestFlagsOffset": "_REQ_FLAGS",
    "kRequestFlagClientComputesNext": "FLAG_CLIENT_COMPUTES_NEXT",
    "kReplySeqOffset": "_REP_SEQ",
    "kReplyCodeOffset": "_REP_CODE",
    "kReplyMessageBytesOffset": "_REP_MSG_BYTES",
    "kReplyRunUsOffset": "_REP_RUN_US",
    "kReplyMessageOffset": "_REP_MSG",
    "kSlotsOffset": "SLOTS_OFFSET",
    "kSlotBytes": "SLOT_BYTES",
}
# Limits the daemon enforces on its side alone; the client reads the
# message length from reply.message_bytes and sizes its block itself.
DAEMON_ONLY = {"kReplyMessageCapacity", "kMinChannelBytes", "kMaxChannelBytes"}

CONSTANT = re.compile(r"inline constexpr \w+ (k\w+) = ([^;]+);")
ENUMERATOR = re.compile(r"^\s*(kChannel\w+) = (\w+),", re.MULTILINE)


def integer(text: str) -> int:
    """An integer literal of the header, or a left shift of two ("1 << 20")."""
    parts = [int(p.strip(), 0) for p in text.split("<<")]
    return parts[0] << parts[1] if len(parts) == 2 else parts[0]


def header_constants() -> dict[str, int]:
    text = HEADER.read_text()
    found = {}
    for name, value in CONSTANT.findall(text) + ENUMERATOR.findall(text):
        found[name] = integer(value)
    return found


def test_header_constants_are_all_accounted_for():
    found = header_constants()
    assert set(found) == set(MIRRORED) | DAEMON_ONLY, (
        "server/call_channel_layout.h and this test's lists differ: mirror the new "
        "constant in client/kiln/channel_layout.py (or list it as daemon-only)")


def test_python_layout_matches_the_header():
    found = header_constants()
    mismatched = {cpp: (found[cpp], getattr(channel_layout, py, None))
                  for cpp, py in MIRRORED.items()
                  if getattr(channel_layout, py, None) != found[cpp]}
    assert mismatched == {}, f"header value vs channel_layout.py: {mismatched}"
