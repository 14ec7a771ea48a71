"""The byte layout of a call channel block: server/call_channel_layout.h's
numbers, which this mirrors (change both together;
tests/python/test_channel_layout.py checks them against the header).
channel.py speaks the protocol; native.py's self-test checks the C++ helper
writes the same."""

LAYOUT_VERSION = 1
MAGIC = 0x314E484B
STATE_IDLE, STATE_REQUEST, STATE_RUNNING, STATE_REPLY = 0, 1, 2, 3
_STATE, _CLOSED, _MAGIC, _VERSION = 0, 4, 8, 12
_REQ_SEQ, _REQ_HANDLE, _REQ_INPUTS, _REQ_OUTPUTS, _REQ_FLAGS = 64, 72, 80, 84, 88
FLAG_CLIENT_COMPUTES_NEXT = 1
_REP_SEQ, _REP_CODE, _REP_MSG_BYTES, _REP_RUN_US, _REP_MSG = 128, 136, 140, 144, 192
SLOTS_OFFSET = 1024
SLOT_BYTES = 24
