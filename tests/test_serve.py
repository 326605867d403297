"""`dpt serve` (issue 104): a run's policy on openpi's websocket protocol, driven by openpi-client itself (a side
environment the test builds, or skips saying why) and by the messages its Packer wrote (committed); every bad message
is one reply and the connection goes on; clients keep their own histories; SIGTERM closes a waiting client; no
listening beyond loopback without a key."""
import json, os, re, signal, subprocess, sys, time, venv
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, dpt

pytest.importorskip("websockets", reason="dpt serve needs websockets and msgpack: pip install 'dptoolkit[serve]'")
pytest.importorskip("msgpack")
from websockets.sync.client import connect   # noqa: E402
from dptoolkit.serve import PolicyServer, Served, packb, serve, unpackb   # noqa: E402

DATA = ROOT / "tests" / "data" / "serve"
sys.path.insert(0, str(DATA))
from make_messages import observations   # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    "A small camera policy (head_camera 3×24×32, state 14; 10 sampler steps), trained 2 steps."
    from dptoolkit.store import sample_data
    d = tmp_path_factory.mktemp("serve")
    store = sample_data(d / "data", tasks=1, episodes=4, image=True, seed=2)[0]
    dpt("train", "--config", "test", "--data", store, "--out", d / "run", "--nprocs", 1, "--no-progress",
        "training.max_steps=2", "training.checkpoint_every=0", "dataloader.batch_size=4", "policy.down_dims=[32,64]",
        "policy.diffusion_step_embed_dim=32", "policy.obs_encoder.backbone=small", "policy.num_inference_steps=10",
        check=0)
    return d / "run"


def _obs(seed=0):
    r = np.random.default_rng(seed)
    return {"state": r.normal(size=14), "images": {"head": r.integers(0, 255, (24, 32, 3), dtype=np.uint8)}}


def test_messages_openpi_client_wrote_read_and_written_byte_for_byte():
    import msgpack
    theirs = dict(msgpack.unpackb((DATA / "openpi_client_messages.msgpack").read_bytes()))
    for name, obs in observations().items():
        assert packb(obs) == theirs[name], name                       # what their client sends, we write
        back = unpackb(theirs[name])                                  # and read it back as they wrote it
        flat = lambda d, p="": {k2: v2 for k, v in d.items() for k2, v2 in
                                (flat(v, p + k + "/").items() if isinstance(v, dict) else [(p + k, v)])}
        mine, got = flat(obs), flat(back)
        assert mine.keys() == got.keys(), name
        for k in mine:
            assert np.array_equal(mine[k], got[k]) and np.asarray(got[k]).dtype == np.asarray(mine[k]).dtype, (name, k)


def test_bad_messages_are_one_reply_each_and_the_connection_goes_on(run, monkeypatch):
    import dptoolkit.serve as sv
    import msgpack
    monkeypatch.setattr(sv, "MAX_PIXELS", 64 * 64)   # an oversized frame without sending 50 MB
    good = _obs()
    arr = lambda dtype, shape, data: msgpack.packb({"state": {b"__ndarray__": True, b"data": data, b"dtype": dtype,
                                                               b"shape": shape}})
    bad = [(b"\xc1\x00", "is not msgpack"), ("a text frame", "a text message arrived"),
           (packb([1, 2]), "a message is a dict of observations; a list arrived"),
           (packb({"state": good["state"]}), "the observation has no 'head_camera'"),
           (packb({**good, "state": np.zeros(13)}), "'state' has shape [13]; the policy reads [14]"),
           (packb({**good, "images": {"head": np.zeros((24, 32, 3), np.float32)}}), "sent as uint8"),
           (packb({**good, "images": {"head": np.zeros((100, 100, 3), np.uint8)}}), "larger than any camera frame"),
           (arr("|O", [1], b"\0" * 8), "object, structured and complex arrays are refused"),
           (arr("<f8", [14], b"\0" * 8), "needs 112 bytes; 8 arrived"),
           (packb({**good, "reset": True, "seed": "seven"}), "'seed' is 'seven'"),
           (packb({**good, "prompt": "pick"}), "reads no instruction")]
    with serve(run, port=0) as srv, connect(srv.url, compression=None, max_size=None) as ws:
        unpackb(ws.recv())
        for msg, says in bad:
            ws.send(msg)
            reply = ws.recv(timeout=60)
            assert isinstance(reply, str) and reply.startswith("dpt serve: ") and says in reply, (says, reply)
            assert "Traceback" not in reply and "\n" not in reply
        ws.send(packb(good))
        assert unpackb(ws.recv(timeout=60))["actions"].shape == (6, 14)   # and it goes on
        assert (srv.errors, srv.chunks) == (len(bad), 1)


def test_clients_keep_their_own_history(run):
    """Two clients interleaved get, each, the chunks a client alone gets for the same observations and seed: the
    server keeps one observation history and one sampler per connection."""
    seq = [_obs(i) for i in range(4)]
    def alone(srv, seed):
        with connect(srv.url) as ws:
            unpackb(ws.recv())
            out = []
            for i, o in enumerate(seq):
                ws.send(packb({**o, "reset": i == 0, "seed": seed}))
                out.append(unpackb(ws.recv(timeout=60))["actions"])
            return out
    with serve(run, port=0) as srv:
        ref = {s: alone(srv, s) for s in (1, 2)}
        with connect(srv.url) as a, connect(srv.url) as b:
            unpackb(a.recv()); unpackb(b.recv())
            got = {1: [], 2: []}
            for i, o in enumerate(seq):          # a's episode and b's (another seed), message by message
                a.send(packb({**o, "reset": i == 0, "seed": 1}))
                b.send(packb({**o, "reset": i == 0, "seed": 2}))
                got[1].append(unpackb(a.recv(timeout=60))["actions"])
                got[2].append(unpackb(b.recv(timeout=60))["actions"])
    for s in (1, 2):
        assert all(np.array_equal(x, y) for x, y in zip(got[s], ref[s])), s
    assert not np.array_equal(ref[1][1], ref[2][1])


def test_a_client_gone_mid_chunk_leaves_the_server_serving(run):
    with serve(run, port=0) as srv:
        with connect(srv.url) as ws:
            unpackb(ws.recv())
            ws.send(packb(_obs()))                       # and gone before its chunk comes back
        with connect(srv.url) as ws2:
            unpackb(ws2.recv())
            ws2.send(packb(_obs()))
            assert unpackb(ws2.recv(timeout=60))["actions"].shape == (6, 14)
        assert srv.errors == 0


def test_sigterm_closes_a_waiting_client_and_the_server_says_so(run):
    """`dpt serve` in its own process: the banner names the port; SIGTERM while a client waits for chunks (50
    observations sent at once, answered one by one) closes that client's connection (no hang, not every chunk sent)
    and the server exits 0 saying what it served."""
    from websockets.exceptions import ConnectionClosed
    p = subprocess.Popen(["dpt", "serve", str(run), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline()
        url = re.search(r"on (ws://127\.0\.0\.1:\d+) \(openpi's protocol", line)
        assert url, line + (p.stderr.read() if p.poll() is not None else "")
        with connect(url.group(1)) as ws:
            assert unpackb(ws.recv())["action_dim"] == 14
            for _ in range(50): ws.send(packb(_obs()))
            unpackb(ws.recv(timeout=60))                  # the first chunk: the server is answering
            p.send_signal(signal.SIGTERM)
            got, t0 = 1, time.monotonic()
            with pytest.raises(ConnectionClosed):
                while True:
                    unpackb(ws.recv(timeout=30))
                    got += 1
            assert got < 50 and time.monotonic() - t0 < 30, got
        assert p.wait(60) == 0
        assert "dpt serve: stopped (1 clients" in p.stdout.read()
    finally:
        if p.poll() is None: p.kill()


def test_no_listening_beyond_loopback_without_a_key(run):
    r = dpt("serve", run, "--host", "0.0.0.0", "--port", "0", check=1)
    assert r.stderr.count("\n") == 1 and "serves beyond this machine: give an API key" in r.stderr, r.stderr
    from websockets.exceptions import InvalidStatus
    srv = PolicyServer(Served(run), "127.0.0.1", 0, api_key="k3y").start()
    try:
        with pytest.raises(InvalidStatus, match="401"):
            connect(srv.url)
        with connect(srv.url, additional_headers={"Authorization": "Api-Key k3y"}) as ws:
            assert unpackb(ws.recv())["action_horizon"] == 6
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def openpi_client_python(tmp_path_factory):
    """The interpreter of an environment with openpi-client 0.1.2 (it pins numpy < 2: never ours):
    $DPT_OPENPI_CLIENT_PYTHON, else one built here; the tests that need it skip, saying why, where it cannot be."""
    given = os.environ.get("DPT_OPENPI_CLIENT_PYTHON")
    if given: return given
    d = tmp_path_factory.mktemp("openpi-client")
    venv.create(d, with_pip=True)
    py = str(d / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "openpi-client==0.1.2", "typing_extensions"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"openpi-client could not be installed in a side environment: {r.stderr.strip()[-300:]}")
    return py


CLIENT = r'''
import json, sys
import numpy as np
from openpi_client import action_chunk_broker, websocket_client_policy
port, key = int(sys.argv[1]), sys.argv[2] or None
client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", port, api_key=key)
meta = client.get_server_metadata()
r = np.random.default_rng(0)
obs = {"state": r.normal(size=14), "images": {"head": r.integers(0, 255, (24, 32, 3), dtype=np.uint8)}}
out = {"meta": meta, "first": client.infer({**obs, "reset": True, "seed": 7})["actions"].tolist()}
try: client.infer({**obs, "state": np.zeros(13)})
except RuntimeError as e: out["error"] = str(e)
broker = action_chunk_broker.ActionChunkBroker(client, action_horizon=meta["action_horizon"])
out["steps"] = [broker.infer(obs)["actions"].tolist() for _ in range(2 * meta["action_horizon"])]
print(json.dumps(out))
'''


def test_openpi_client_itself_drives_the_server(run, openpi_client_python):
    """openpi-client 0.1.2's `WebsocketClientPolicy` (with its API key) and `ActionChunkBroker`, unchanged, in their own
    environment: the metadata, a chunk equal to the in-process one for the same seed, an error as their RuntimeError,
    and one action per step from the broker, a new chunk every `action_horizon` steps."""
    s = Served(run)
    want = s.step(s.episode(seed=7), {**_obs(), "reset": True})["actions"]
    with PolicyServer(s, "127.0.0.1", 0, api_key="k3y") as srv:
        r = subprocess.run([openpi_client_python, "-c", CLIENT, str(srv.port), "k3y"], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert srv.chunks == 3 and srv.errors == 1
    assert out["meta"]["observation"]["head_camera"] == {"shape": [3, 24, 32], "dtype": "uint8"}
    assert np.array_equal(np.asarray(out["first"], np.float32), want)
    assert out["error"].startswith("Error in inference server:\ndpt serve: 'state' has shape [13]")
    steps = np.asarray(out["steps"])
    assert steps.shape == (12, 14)
