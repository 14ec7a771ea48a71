"""Memory and build time of dynamic-shape variants in the daemon.

A transformers LlamaForCausalLM (random weights from a config, nothing
downloaded) runs over sequence lengths 1..N under backend="kiln". Dynamo
compiles length 1 statically and then a dynamic graph; the daemon builds
one static variant per new length from its template. Every variant folds
and packs the same weights: the daemon should hold them once, so its
resident memory grows by the variants' own memory plans, not by a copy of
the weights per length.

Prints the daemon's resident memory after chosen lengths, the packed
weights it reports, and the median variant build time (from its log).

    .venv/bin/python bench/cache/variant_memory.py            # hidden 512, 4 layers, lengths 1..32
    .venv/bin/python bench/cache/variant_memory.py --lengths 64
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "client"))

from private_daemon import PrivateDaemon, find_kilnd, resident_bytes  # noqa: E402

MiB = 1 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()

    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.hidden * 43 // 16,
        num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
        vocab_size=8192, max_position_embeddings=max(256, args.lengths))
    model = transformers.LlamaForCausalLM(config).eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    kilnd = PrivateDaemon(find_kilnd(), prefix="kiln-variants-", extra_args=["--no-cache"])
    os.environ["KILN_SOCKET"] = kilnd.socket
    os.environ["KILN_AUTOSTART"] = "0"
    report = {1, 2, 3, 4, 8, 16, 32, 64, args.lengths}
    worst = 0.0
    try:
        compiled = torch.compile(model, backend="kiln")
        print(f"Llama hidden {args.hidden}, {args.layers} layers: {weight_bytes / MiB:.1f} MiB "
              f"of weights; daemon resident {resident_bytes(kilnd.proc.pid) / MiB:.0f} MiB idle")
        with torch.no_grad():
            for t in range(1, args.lengths + 1):
                x = torch.randint(0, config.vocab_size, (1, t))
                got, want = compiled(x).logits, model(x).logits
                worst = max(worst, ((got - want).abs().max() / want.abs().max()).item())
                if t in report:
                    s = kilnd.stats()
                    print(f"  length {t:3d}: resident {s.resident_bytes / MiB:6.0f} MiB, packed "
                          f"weights {s.packed_weight_bytes / MiB:.0f} MiB, "
                          f"{s.specializations} variants")
        times = [float(m) for m in re.findall(r"compiled graph \S+ .* in ([0-9.]+) ms",
                                                open(kilnd.log_path).read())]
        print(f"  {len(times)} graphs built, median {statistics.median(times):.1f} ms; "
              f"worst difference to eager {worst:.1e} of the logits' scale")
    finally:
        kilnd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
