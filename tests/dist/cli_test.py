#!/usr/bin/env python3
"""End-to-end checks of data-parallel `amber train` under mpirun: 2 processes give the
losses and final weights of 1 process with twice the micro-batches (a dense and an MoE
model); ZeRO-1 writes the checkpoint files of plain data parallel, bit for bit, and so
do gradient bucket sums overlapped with the backward and summed after it; a
checkpoint saved at 2 processes (plain or ZeRO-1) resumes at 1 and at 3
and continues the loss curve of one uninterrupted process; killing one rank, or
stopping it, ends the others within 60 s with an error naming a rank. Exits 77
(skipped) where mpirun is absent.

Tolerance: one process adds a micro-batch's weight gradients into the previous one's
inside its GEMM (OpenBLAS accumulates into C block by block of the inner dimension)
and scatter-adds embedding rows token by token, while two ranks each finish their
gradient and MPI adds the two. The sums differ by f32 rounding (about 1e-7 of an
entry), which a few AdamW steps carry into the losses at about 1e-8 relative; the
checks allow 1e-6 relative on losses and, on weights, 1e-4 of each tensor's largest entry
(AdamW divides by the root of the second moment, so an entry whose gradient is nearly
zero moves by rounding more than its gradient would suggest); a step with other
micro-batches moves losses by per cents and weights by per cents of that entry, which
the test checks too."""
import array
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, RUN_TABLES  # noqa: E402


CONFIG = """
[model]
vocab_size = 512
dim = 32
depth = 2
heads = 2
kv_heads = 1
mlp_hidden = 64
max_position = 256

[train]
steps = 4
micro_batch_tokens = 512
eval_every = 2
eval_batches = 1
checkpoint_every = 2
device = "cpu"
tensorboard = false
comm_timeout_s = 30
""" + RUN_TABLES

# mpirun as root (CI runs as root), more ranks than a 2-core machine has cores, and
# ranks that yield their core while they wait.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}
# ASAN_OPTIONS (leaks unchecked in ranks: tests/CMakeLists.txt says why) comes from ctest.


def read_safetensors(path):
    """{name: list of floats} of an f32 safetensors file."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        out[name] = array.array("f", data[begin:end]).tolist()
    return out


def losses(run_dir):
    """{step: loss} of a run's metrics.jsonl."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record:
                out[record["step"]] = record["loss"]
    return out


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def weight_gap(a, b):
    """The largest difference between two weight dicts' tensors, relative to the largest
    entry of its tensor, and that tensor's name (inf where the names differ)."""
    if a.keys() != b.keys():
        return float("inf"), f"names {sorted(a.keys() ^ b.keys())}"
    gaps = []
    for name in a:
        scale = max(max(abs(x) for x in a[name]), 1e-12)
        gaps.append((max(abs(x - y) for x, y in zip(a[name], b[name])) / scale, name))
    return max(gaps)


def rank_pid(launcher, rank):
    """The pid of the process that mpirun `launcher` started as `rank` (read from /proc:
    its parent and its OMPI_COMM_WORLD_RANK)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != launcher.pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(entry)
        except (OSError, ValueError, IndexError):
            pass
    return None


def check_failure(checks, env, args, run_dir, action, *fragments):
    """Starts a long 2-rank run, waits for its first step, does `action` (kill, stop or
    term: SIGKILL, SIGSTOP or SIGTERM) to rank 1 and expects every rank gone within 60 s,
    with an output holding every fragment."""
    launcher = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        time.sleep(0.05)
    victim = rank_pid(launcher, 1)
    checks.expect(victim is not None, f"{action}: no rank 1 under mpirun")
    if victim is None:
        launcher.kill()
        return
    os.kill(victim, {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "term": signal.SIGTERM}[action])
    start = time.time()
    try:
        output, _ = launcher.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        launcher.kill()
        output, _ = launcher.communicate()
    elapsed = time.time() - start
    if action == "stop":
        try:
            os.kill(victim, signal.SIGKILL)  # a stopped process outlives its launcher
        except ProcessLookupError:
            pass
    checks.expect(launcher.returncode != 0 and elapsed < 60,
                  f"{action} rank 1: mpirun exit {launcher.returncode} after {elapsed:.1f} s")
    for f in fragments:
        checks.expect(f in output, f"{action} rank 1: {f!r} not in {output[-1500:]!r}")


def main():
    checks = Checks()
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("skipped: mpirun is not installed (scripts/setup installs openmpi-bin)")
        return 77
    env = dict(os.environ, **MPI_ENV)
    expect = checks.expect
    with tempfile.TemporaryDirectory() as tmp:
        tok, shards = checks.corpus(tmp, 500)
        config = os.path.join(tmp, "run.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(shards=shards, tok=tok))

        def train(name, ranks, accum, *extra, steps=4):
            """Trains into tmp/name with `ranks` processes of `accum` micro-batches."""
            out_dir = os.path.join(tmp, name)
            args = [checks.amber, "train", config, "--quiet", "--set", f"train.out_dir={out_dir}", "--set",
                    f"train.grad_accum={accum}", "--set", f"train.steps={steps}", *extra]
            if ranks > 0:
                args = [mpirun, "-np", str(ranks)] + args
            r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
            expect(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-2000:]}")
            return out_dir

        def expect_same_checkpoints(a, b, what_b, what_a):
            """The checkpoint files of runs a and b are the same bytes at steps 2 and 4."""
            for step in (2, 4):
                for f in ("model.safetensors", "optimizer.safetensors"):
                    same = [open(os.path.join(d, "checkpoints", f"step-{step:08d}", f), "rb").read() for d in (a, b)]
                    expect(same[0] == same[1], f"{what_b} step {step} {f} differs from {what_a}")

        def final_weights(run_dir, step=4):
            return read_safetensors(os.path.join(run_dir, "checkpoints", f"step-{step:08d}", "model.safetensors"))

        # 2 ranks x 2 micro-batches against 1 process x 4.
        one = train("one", 0, 4)
        two = train("two", 2, 2)
        l1, l2 = losses(one), losses(two)
        expect(sorted(l1) == [1, 2, 3, 4] and sorted(l2) == sorted(l1), f"steps logged: {sorted(l1)} {sorted(l2)}")
        for step in l1:
            expect(close(l1[step], l2.get(step, 0), 1e-6), f"step {step}: loss {l1[step]} at 1 process, "
                   f"{l2.get(step)} at 2")
        gap = weight_gap(final_weights(one), final_weights(two))
        expect(gap[0] < 1e-4, f"2 processes end on other weights than 1 process with twice the micro-batches: {gap}")
        # Rank 1 writes nothing into out_dir: one metrics file, one writer's lines.
        expect(len(open(os.path.join(two, "metrics.jsonl")).readlines()) ==
               len(open(os.path.join(one, "metrics.jsonl")).readlines()), "2 processes logged other records")
        # amber launch: through mpirun, the very run mpirun gives; with torchrun-style
        # variables, CPU ranks cannot connect, which the ranks and the launcher say.
        launched = os.path.join(tmp, "launched")
        r = subprocess.run([checks.amber, "launch", "-n", "2", "--", "train", config, "--quiet", "--set",
                            f"train.out_dir={launched}", "--set", "train.grad_accum=2", "--set", "train.steps=4"],
                           capture_output=True, text=True, env=env, timeout=300)
        expect(r.returncode == 0, f"amber launch: exit {r.returncode}: {r.stderr[-1000:]}")
        expect(final_weights(launched) == final_weights(two), "amber launch -n 2 ended on other weights than mpirun")
        r = subprocess.run([checks.amber, "launch", "-n", "2", "--via", "env", "--", "train", config, "--quiet"],
                           capture_output=True, text=True, env=env, timeout=120)
        expect(r.returncode == 1 and "amber launch: rank" in r.stderr and "exited with status 1" in r.stderr and
               "torchrun-style variables" in r.stderr and "mpirun -np 2" in r.stderr,
               f"amber launch --via env of CPU ranks: exit {r.returncode}, {r.stderr[-1000:]!r}")
        checks.expect_failure(["launch", "-n", "2"], 1, "nothing to run", "amber launch -n 2 -- train run.toml")
        checks.expect_failure(["launch", "-n", "0", "--", "train", config], 2, "--processes", "0")
        # An MoE model whose balance bias moves by the step's expert loads: the ranks sum them.
        moe = ["--set", "model.moe_experts=4", "--set", "model.moe_top_k=2", "--set", "model.moe_hidden=32",
               "--set", "model.moe_bias_update_rate=0.01", "--set", "model.moe_balance_loss_weight=0.01"]
        moe_one, moe_two = train("moe_one", 0, 4, *moe), train("moe_two", 2, 2, *moe)
        m1, m2 = losses(moe_one), losses(moe_two)
        expect(all(close(m1[k], m2.get(k, 0), 1e-6) for k in m1), f"MoE losses: 1 process {m1}, 2 {m2}")
        w1, w2 = final_weights(moe_one), final_weights(moe_two)
        gap = weight_gap(w1, w2)
        expect(any("balance_bias" in k for k in w1) and gap[0] < 1e-4,
               f"MoE: 2 processes end on other weights or balance biases than 1 process: {gap}")
        # mpirun's world of one runs every collective of the MPI backend, and changes no bit.
        alone = train("alone", 1, 4)
        expect(losses(alone) == l1 and final_weights(alone) == final_weights(one),
               "mpirun -np 1 trained otherwise than one process without a launcher")
        # A misplaced micro-batch would show: 2 ranks of 1 micro-batch are another run.
        other = train("other", 2, 1)
        expect(not close(losses(other)[2], l1[2], 1e-3), "a step of half the micro-batches gave the same loss")
        gap = weight_gap(final_weights(one), final_weights(other))
        expect(gap[0] > 1e-2, f"a run of half the micro-batches ends on nearly the same weights: {gap}")

        # A checkpoint of 2 ranks x 3 resumes at 1 x 6 and 3 x 2, as one process of 6 goes.
        reference = losses(train("six", 0, 6))
        saved = os.path.join(train("saved", 2, 3), "checkpoints", "step-00000002")
        for ranks, accum in ((0, 6), (3, 2)):
            resumed = losses(train(f"resumed{ranks}", ranks, accum, "--resume-from", saved))
            expect(sorted(resumed) == [3, 4], f"resumed at {ranks or 1} processes: steps {sorted(resumed)}")
            for step in (3, 4):
                expect(close(resumed.get(step, 0), reference[step], 1e-6),
                       f"resumed at {ranks or 1} processes: step {step} loss {resumed.get(step)}, one process "
                       f"{reference[step]}")
        # ZeRO-1 at 2 ranks writes the very checkpoint files of plain data parallel (AdamW
        # and Muon, whose matrices are orthogonalised on their owners); its checkpoint
        # resumes at 3 sharded ranks and at 1 unsharded process on one process's loss curve.
        for optimizer in ("adamw", "muon"):
            opt = ["--set", f"optimizer.name={optimizer}"]
            ddp = train(f"ddp_{optimizer}", 2, 3, *opt)
            zero = train(f"zero_{optimizer}", 2, 3, *opt, "--set", "train.zero=1")
            expect_same_checkpoints(ddp, zero, f"{optimizer}: ZeRO-1's", "data parallel's")
            # Bucket sums started during the backward (the default) or after it: the same
            # files, at 2 ranks and at 3 (where the order of adding the ranks could show).
            after = train(f"after_{optimizer}", 2, 3, *opt, "--set", "train.overlap_grad_sums=false")
            expect_same_checkpoints(ddp, after, f"{optimizer}: summed after the backward, the",
                                    "overlapped sums'")
            overlapped3, after3 = (train(f"{n}3_{optimizer}", 3, 2, *opt, "--set", f"train.overlap_grad_sums={v}")
                                   for n, v in (("overlapped", "true"), ("after", "false")))
            expect_same_checkpoints(overlapped3, after3, f"{optimizer}: at 3 ranks, summed after the backward, the",
                                    "overlapped sums'")
            reference = losses(train(f"one_{optimizer}", 0, 6, *opt))
            saved = os.path.join(zero, "checkpoints", "step-00000002")
            for ranks, accum, extra in ((3, 2, ["--set", "train.zero=1"]), (0, 6, [])):
                resumed = losses(train(f"zero_resumed_{optimizer}{ranks}", ranks, accum, *opt, *extra,
                                       "--resume-from", saved))
                for step in (3, 4):
                    expect(close(resumed.get(step, 0), reference[step], 1e-6),
                           f"{optimizer}: ZeRO-1 checkpoint resumed at {ranks or 1} processes: step {step} loss "
                           f"{resumed.get(step)}, one process {reference[step]}")
        # In bf16 ZeRO-1 shards the f32 master weights as well and gathers the bf16 working
        # copies alone: still the very checkpoint files of data parallel, resuming at 3
        # sharded ranks and at 1 process on one process's loss curve.
        bf16 = ["--set", "optimizer.name=muon", "--set", "train.compute_dtype=bf16"]
        ddp = train("ddp_bf16", 2, 3, *bf16)
        zero = train("zero_bf16", 2, 3, *bf16, "--set", "train.zero=1")
        expect_same_checkpoints(ddp, zero, "bf16: ZeRO-1's", "data parallel's")
        reference = losses(train("one_bf16", 0, 6, *bf16))
        saved = os.path.join(zero, "checkpoints", "step-00000002")
        for ranks, accum, extra in ((3, 2, ["--set", "train.zero=1"]), (0, 6, [])):
            resumed = losses(train(f"zero_resumed_bf16{ranks}", ranks, accum, *bf16, *extra, "--resume-from", saved))
            for step in (3, 4):
                expect(close(resumed.get(step, 0), reference[step], 1e-6),
                       f"bf16: ZeRO-1 checkpoint resumed at {ranks or 1} processes: step {step} loss "
                       f"{resumed.get(step)}, one process {reference[step]}")
        # A rank killed: Open MPI's mpirun ends the others and names it. A rank that hangs
        # (stopped): rank 0's collective times out (train.comm_timeout_s) and names it.
        long_run = [mpirun, "-np", "2", checks.amber, "train", config, "--quiet", "--set", "train.steps=100000",
                    "--set", "train.checkpoint_every=0", "--set", "train.comm_timeout_s=10"]
        killed, stopped, termed = (os.path.join(tmp, n) for n in ("killed", "stopped", "termed"))
        check_failure(checks, env, long_run + ["--set", f"train.out_dir={killed}"], killed, "kill",
                      "process rank 1", "exited on signal 9")
        check_failure(checks, env, long_run + ["--set", f"train.out_dir={stopped}"], stopped, "stop",
                      "amber: error: rank 0 of 2 waited more than 10 s", "rank 1 (",
                      ": that rank hangs or died")
        # SIGTERM to one rank (a scheduler's): its vote travels in the next step, so both
        # ranks stop after the same step, rank 0 names the signal and writes a checkpoint.
        check_failure(checks, env, long_run + ["--set", f"train.out_dir={termed}"], termed, "term",
                      "stopped by signal 15 after step")
        expect(os.path.exists(os.path.join(termed, "checkpoints", "latest")), "SIGTERM to rank 1 leaves a checkpoint")
        # A rank that stops on an error of its own (its data folder is missing) ends the run
        # at once with its message, rather than leaving the others in a collective.
        script = (f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then set -- --set data.dir={tmp}/nowhere; fi; '
                  f'exec {checks.amber} train {config} --quiet --set train.steps=100000 '
                  f'--set train.out_dir={tmp}/errored "$@"')
        start = time.time()
        r = subprocess.run([mpirun, "-np", "2", "sh", "-c", script], capture_output=True, text=True, env=env,
                           timeout=120)
        elapsed = time.time() - start
        expect(r.returncode != 0 and elapsed < 60 and "amber: error: " in r.stderr and "nowhere" in r.stderr,
               f"a rank's own error: exit {r.returncode} after {elapsed:.1f} s: {r.stderr[-1500:]!r}")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
