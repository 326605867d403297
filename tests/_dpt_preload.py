"""The preloader behind tests/conftest.py's `dpt()` (issue 81: CI time): one process per test worker imports once what
every `dpt` command imports (torch, diffusers' schedulers, the training loop, the CLI: ~3.5 s of CPU a command paid
again and again), then forks a child per call. The child takes the call's arguments, working folder, environment and
pipes (sent over a socket with SCM_RIGHTS) and runs the installed `dpt` console script as `__main__`, as the interpreter
would (runpy): the same code from `main()` on, the same exit status and output, its processes below it, its atexit
handlers at its end. What an interpreter reads only as it starts (PYTHONPATH, OMP_NUM_THREADS, TMPDIR, ...) cannot
change in a fork: conftest runs such calls as real subprocesses. Spring (Rails) and Android's zygote preload this way.

Protocol (SOCK_SEQPACKET, one message each): request JSON {argv, env, cwd} with the stdout / stderr write ends; reply
{"pid"} once forked, then {"rc"} (os.waitstatus_to_exitcode) when the child has ended. An empty read: the test worker
has gone, and so does this process."""
import json, os, socket, sys


def serve(sock):
    "Answer requests until the test worker closes its end; return (request, fds) in each forked child."
    while True:
        try: msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        except OSError: os._exit(0)
        if not msg: os._exit(0)
        pid = os.fork()
        if pid == 0:
            sock.close()
            return json.loads(msg), fds
        for fd in fds: os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    script = sys.argv[1]
    sock = socket.socket(fileno=int(sys.argv[2]))
    # the console script's sys.path: its own folder first, never this file's (tests/) nor the working folder
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import importlib
    import dptoolkit.cli, dptoolkit.processes as processes, dptoolkit.train           # noqa: F401
    for m in processes.DIFFUSERS_PRELOAD: importlib.import_module(m)   # what the ranks' forkserver preloads, the same list
    import gc
    gc.freeze()   # what is imported stays shared with every child, and no child's last collections walk it again
    sock.send(b'{"ready": true}')
    req, (out, err) = serve(sock)
    # the child: the call's pipes, no standard input, its folder and environment, a fresh global numpy RNG (Python's own
    # random reseeds itself in a fork), then the console script as __main__
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0); os.dup2(out, 1); os.dup2(err, 2)
    for fd in (null, out, err): os.close(fd)
    os.environ.clear(); os.environ.update(req["env"])
    os.chdir(req["cwd"])
    import numpy as np
    np.random.seed()
    import runpy
    sys.argv = [script, *req["argv"]]
    runpy.run_path(script, run_name="__main__")
