"""Asks for GIB GiB of GPU memory at once, and prints one JSON line saying whether PyTorch
raised torch.OutOfMemoryError (what a tenant over its memory quota must get), any other error,
and how many GiB it then got in 256 MiB pieces (what the quota let it have).

    python3 overquota.py GIB
"""
import os
import sys

import torch

from sync import emit

PIECE = 256 * 2**20


def pieces(limit_bytes):
    held = []
    try:
        while len(held) * PIECE < limit_bytes:
            held.append(torch.empty(PIECE, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    return round(len(held) * PIECE / 2**30, 2)


def main(gib):
    out = {"worker": "overquota", "pid": os.getpid(), "asked_gib": gib, "oom": False}
    try:
        x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        out["got_all"] = True
        del x
    except torch.OutOfMemoryError as e:
        out.update(oom=True, got_all=False, message=str(e).splitlines()[0])
    except Exception as e:  # noqa: BLE001
        out.update(got_all=False, error=f"{type(e).__name__}: {e}")
    torch.cuda.empty_cache()
    if "error" not in out:
        out["got_in_pieces_gib"] = pieces(gib * 2**30)
    emit(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: overquota.py GIB")
    main(float(sys.argv[1]))
