"""Messages written by openpi-client's own code, for tests/test_serve.py (no side environment needed there).

Run with the interpreter of an environment that has openpi-client (it pins numpy < 2, so not ours):
    python -m venv /tmp/opc && /tmp/opc/bin/pip install openpi-client==0.1.2 typing_extensions
    /tmp/opc/bin/python tests/data/serve/make_messages.py
Writes openpi_client_messages.msgpack: a msgpack list of (name, bytes) pairs, each bytes what
`openpi_client.msgpack_numpy.Packer().pack(obs)` wrote for the observation `observations()` below builds (the test
builds the same ones with numpy alone)."""
import sys
from pathlib import Path

import msgpack
import numpy as np


def observations() -> dict:
    "The observations, from numpy alone (the test imports this function)."
    r = np.random.default_rng(0)
    return {
        "aloha": {"state": r.normal(size=14), "images": {"cam_high": r.integers(0, 255, (3, 24, 32), dtype=np.uint8)},
                  "prompt": "transfer the cube"},
        "lerobot_names": {"observation.state": r.normal(size=6).astype(np.float32),
                          "observation.images.top": r.integers(0, 255, (48, 64, 3), dtype=np.uint8)},
        "scalars": {"reset": True, "seed": 7, "step": np.int64(3), "gain": np.float32(0.5), "flag": np.bool_(True)},
    }


if __name__ == "__main__":
    import openpi_client
    from openpi_client import msgpack_numpy
    packer = msgpack_numpy.Packer()
    out = [(name, packer.pack(obs)) for name, obs in observations().items()]
    dest = Path(__file__).with_name("openpi_client_messages.msgpack")
    dest.write_bytes(msgpack.packb(out, use_bin_type=True))
    print(f"wrote {dest} with openpi-client from {Path(openpi_client.__file__).parent}, numpy {np.__version__}, "
          f"msgpack {msgpack.version}", file=sys.stderr)
