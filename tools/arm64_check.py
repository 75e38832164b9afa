"""The Raspberry Pi check: edge-rl's base install on arm64, emulated, against x86.

    sudo python tools/arm64_check.py [--cache DIR] [--skip-if-unable] [--after FILE]

Raspberry Pi OS (64-bit) is Debian bookworm for arm64 with Python 3.11. This builds such a
root with debootstrap (cached in --cache; ~30 s the first time), enters it with chroot
through qemu-user (binfmt_misc), installs edge-rl there from aarch64 wheels the way
docs/raspberry-pi.md says, and checks, under emulation:
  1. `edge-rl eval` of an int8 CartPole policy exported on x86 from a shipped solved run
     scores >= 475;
  2. its greedy actions on observations recorded on x86 match x86's (>= 99% identical where
     x86's best action leads by more than two output steps), and a continuous policy's (TD3
     Pendulum, exported on x86 from a shipped run) are within one quantization step of the
     action of x86's on >= 99% of them (and never two steps apart);
  3. `edge-rl actor` joins an x86 `edge-rl learner` on loopback and its batches reach the
     learner's replay and are trained on (`edge-rl bench footprint --learner --chroot`, which
     also measures peak RSS and the time to the first action there);
  4. `edge-rl actor --print-systemd-unit` writes a unit that runs the installed edge-rl.
It prints what it measured and exits non-zero on any failure. Needs root (chroot, mount,
binfmt_misc), debootstrap and qemu-user-static (installed with apt-get when missing), and the
x86 side's `[train]` install. --skip-if-unable exits 0 with the reason where the machine
cannot do it (no root, no binfmt_misc): CI uses it.

One script past ~400 lines, on purpose: it builds an arm64 root, installs, exports on x86
and compares under emulation in one run that CI starts beside its own install (--after).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import secrets
import shlex
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: CI starts this before its install
    import numpy as np

REPO = Path(__file__).resolve().parents[1]
HOST_BIN = Path(sys.executable).parent
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
# What a Raspberry Pi OS Lite image has, or gets with the docs' one apt-get line.
ROOT_PACKAGES = "python3,python3-venv,ca-certificates,time"
# aarch64 wheels for Python 3.11 on glibc 2.36 (bookworm): mujoco's need manylinux_2_28
WHEEL_PLATFORMS = ("manylinux_2_17_aarch64", "manylinux_2_28_aarch64")
# docs/raspberry-pi.md gives these commands; the check runs them as they are written
# (tests/test_board.py checks that the page holds each one).
WORKSTATION_COMMANDS = {
    "wheel": "pip wheel --no-deps -w wheels .",
    "download": "pip download --only-binary=:all: "
                + " ".join(f"--platform {p}" for p in WHEEL_PLATFORMS)
                + ' --python-version 3.11 --implementation cp -d wheels '
                  '"$(ls wheels/edge_rl-*.whl)[mujoco]"',
}
PI_COMMANDS = {
    "venv": "python3 -m venv ~/edge-rl",
    "install": "~/edge-rl/bin/pip install --no-compile --no-index --find-links ~/wheels "
               "'edge-rl[mujoco]'",
    "pip check": "~/edge-rl/bin/pip check",
    "eval": "~/edge-rl/bin/edge-rl eval cartpole-int8.tflite --episodes 20",
    "unit": "~/edge-rl/bin/edge-rl actor --learner 192.168.1.10:50051 --token-file ~/token "
            "--spool ~/edge-rl-spool --print-systemd-unit",
}
HOME = "/root"  # the Pi's home folder, in the root
BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")
SOLVED = 475.0
# A solved CartPole run, as `edge-rl export` reads it (config.json and best/): training one
# beside CI's tests took a minute of CPU time. Made by `edge-rl train --env CartPole-v1 --algo
# dqn --steps 60000 --updates-per-step 1 --target-return 490 --seed 0 --lockstep` (best 496.2
# at 17.5k steps) and kept with `python tools/differential_cases.py --import-runs DIR --out
# tests/data/arm64`.
SOLVED_CARTPOLE = REPO / "tests" / "data" / "arm64" / "cartpole-dqn"
# A TD3 Pendulum run (256x256, the default networks), shipped for the same reason (training it
# here took ~12 s of CPU beside the tests, and its best policy was the untrained one at 3,000
# steps). Made by `edge-rl train --env Pendulum-v1 --algo td3 --steps 10000 --eval-every 2500
# --eval-episodes 5 --seed 0 --lockstep` (best -152.6 at 10k steps) and kept the same way.
TRAINED_PENDULUM = REPO / "tests" / "data" / "arm64" / "pendulum-td3"
# the envs an arm64 actor joins an x86 learner in, and their algorithms
FOOTPRINT_ALGOS = {"CartPole-v1": "dqn", "HalfCheetah-v5": "td3"}


class CheckFailed(RuntimeError):
    pass


def run(command: list[str] | str, **kwargs) -> subprocess.CompletedProcess:
    """Run a command, echoing it; raise CheckFailed with its output's tail if it fails."""
    shown = command if isinstance(command, str) else shlex.join(map(str, command))
    print(f"+ {shown}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True,
                          shell=isinstance(command, str), **kwargs)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise CheckFailed(f"`{shown}` exited {done.returncode}:\n{tail}")
    return done


def mount_proc(root: Path) -> None:
    """/proc inside the root, as on a board (the actor reads its start time there)."""
    proc = root / "proc"
    if not os.path.ismount(proc):
        proc.mkdir(exist_ok=True)
        run(["mount", "-t", "proc", "proc", str(proc)])


def in_root(root: Path, script: str) -> subprocess.CompletedProcess:
    """A shell script inside the arm64 root, in its home folder, as a login shell would."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": HOME,
           "LANG": "C.UTF-8"}
    return run(["chroot", str(root), "/bin/sh", "-ec", f"cd ~\n{script}"], env=env)


# -- the machine -------------------------------------------------------------------------------


def unable_reason() -> str | None:
    """Why this machine cannot run the check, or None."""
    if platform.system() != "Linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (chroot, mount and binfmt_misc need it)"
    if not BINFMT.joinpath("register").exists():
        done = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                              capture_output=True, text=True)
        if done.returncode != 0 or not BINFMT.joinpath("register").exists():
            return f"binfmt_misc cannot be mounted ({done.stderr.strip() or 'no register'})"
    return None


def ensure_tools() -> None:
    missing = [pkg for pkg, path in (("debootstrap", "/usr/sbin/debootstrap"),
                                     ("qemu-user-static", str(QEMU_CONF)))
               if not Path(path).exists()]
    if missing:
        run(["apt-get", "update", "-qq"])  # a fresh machine may have no package lists yet
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def ensure_binfmt() -> None:
    """Teach the kernel to run aarch64 binaries with qemu (F: even inside the chroot)."""
    if not BINFMT.joinpath("qemu-aarch64").exists():
        BINFMT.joinpath("register").write_text(QEMU_CONF.read_text().strip() + "\n")
    state = BINFMT.joinpath("qemu-aarch64").read_text()
    if "enabled" not in state:
        raise CheckFailed(f"qemu-aarch64 is registered but not enabled:\n{state}")


def ensure_root(root: Path) -> None:
    """An arm64 Debian bookworm with Python 3.11: built once, then reused.

    Only debootstrap's first stage runs (download and unpack, on x86); the packages it
    fetched but left packed, python3 among them, are unpacked the same way. The second stage
    would configure every package by running its scripts under qemu: about 15 minutes on
    this machine, for nothing the check uses. What configuring would have made and the
    check needs is made here: the linker's cache, and the users and groups files."""
    ready = root / ".edge-rl-root"
    if ready.is_file():
        return
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    run(["debootstrap", "--foreign", "--arch=arm64", "--variant=minbase",
         f"--include={ROOT_PACKAGES}", SUITE, str(root), MIRROR])
    # as debootstrap unpacks: through the merged-/usr links (/bin -> usr/bin), not over them
    run(["bash", "-eo", "pipefail", "-c", 'for deb in "$1"/var/cache/apt/archives/*.deb; do '
         'dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$1" --keep-directory-symlink; done',
         "unpack", str(root)])
    proc = root / "proc"
    if proc.is_symlink():  # the first stage links it to the host's /proc: a loop in the chroot
        proc.unlink()
        proc.mkdir()
    for name in ("passwd", "group"):
        if not (root / "etc" / name).exists():
            shutil.copy(root / "usr" / "share" / "base-passwd" / f"{name}.master",
                        root / "etc" / name)
    run(["chroot", str(root), "/sbin/ldconfig"])
    ready.write_text(SUITE + "\n")


# -- the install, as docs/raspberry-pi.md gives it ---------------------------------------------


def build_wheels(work: Path) -> None:
    """On the workstation: edge-rl's wheel, and every aarch64 wheel its install needs, into
    work/wheels (the page's commands, with a copy of the repository named instead of `.`)."""
    for old in (work / "wheels").glob("edge_rl-*.whl"):
        old.unlink()
    env = {**os.environ, "PATH": f"{HOST_BIN}:{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as source:
        # From a copy: a build in place shares the repository's build/ folder with any other
        # build going on (CI runs the tests, which build a wheel too, beside this check).
        shutil.copytree(REPO, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", "build", "*.egg-info", "__pycache__", ".*_cache"))
        run(WORKSTATION_COMMANDS["wheel"].removesuffix(" .") + f" {source}", cwd=work, env=env)
    run(WORKSTATION_COMMANDS["download"], cwd=work, env=env)


def install(root: Path, wheels: Path) -> None:
    """On the Pi: a virtual environment and edge-rl from the copied wheels, offline."""
    target = root / HOME.lstrip("/") / "wheels"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(wheels, target)
    venv_exists = (root / HOME.lstrip("/") / "edge-rl" / "bin" / "python").exists()
    if not venv_exists:
        in_root(root, PI_COMMANDS["venv"])
    else:  # a cached root: this edge-rl, not the one installed last time
        in_root(root, "~/edge-rl/bin/pip uninstall -y edge-rl")
    in_root(root, PI_COMMANDS["install"])
    in_root(root, PI_COMMANDS["pip check"])


# -- x86's side --------------------------------------------------------------------------------


def x86_policies(cache: Path) -> dict[str, Path]:
    """A solved CartPole run and a trained TD3 Pendulum run (both shipped: SOLVED_CARTPOLE,
    TRAINED_PENDULUM), exported int8 by this edge-rl on x86."""
    runs = {"cartpole": SOLVED_CARTPOLE, "pendulum": TRAINED_PENDULUM}
    policies = {}
    for name, run_dir in runs.items():
        policies[name] = cache / f"{name}-int8.tflite"
        # --force: this check compares one file on two architectures; how closely it follows
        # fp32 is export's own check (a short CartPole run's Q-values have near-ties there)
        run([HOST_BIN / "edge-rl", "export", run_dir, "--int8", "-o", policies[name],
             "--verify-episodes", "0", "--force"])
    best = json.loads((SOLVED_CARTPOLE / "best" / "eval.json").read_text())
    if best["mean"] < SOLVED:  # the shipped run's failure, not arm64's: say so
        raise CheckFailed(f"the shipped CartPole run is not solved (best greedy return "
                          f"{best['mean']}): {SOLVED_CARTPOLE}")
    return policies


def record_observations(policy_file: Path, n: int, seed: int) -> np.ndarray:
    """Observations of an x86 rollout of the policy, with random actions mixed in."""
    import numpy as np

    from edge_rl.device import load_policy
    from edge_rl.device.envs import make_env

    policy = load_policy(policy_file)
    env = make_env(policy.metadata.env_id, seed=seed)
    rng = np.random.default_rng(seed)
    observation, _ = env.reset(seed=seed)
    seen = []
    for _ in range(n):
        seen.append(observation)
        action = (env.action_space.sample() if rng.random() < 0.3
                  else policy.act(observation[None].astype(np.float32))[0])
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
    return np.asarray(seen, np.float32)


ACT_SCRIPT = """
import sys, numpy as np
from edge_rl.device import load_policy
policy = load_policy(sys.argv[1])
np.save(sys.argv[3], np.concatenate([policy.act(row[None]) for row in np.load(sys.argv[2])]))
print(policy.runtime)
"""


def compare_actions(root: Path, policy_file: Path, name: str) -> str:
    """The arm64 runtime's greedy actions on x86-recorded observations against x86's."""
    import numpy as np

    from edge_rl.device import load_policy

    work = Path(tempfile.mkdtemp(dir=root / "tmp"))
    try:
        shutil.copy(policy_file, work / "policy.tflite")
        observations = record_observations(policy_file, 2000, seed=7)
        np.save(work / "observations.npy", observations)
        (work / "act.py").write_text(ACT_SCRIPT)
        seen = "/" + str(work.relative_to(root))
        done = in_root(root, f"~/edge-rl/bin/python {seen}/act.py {seen}/policy.tflite "
                             f"{seen}/observations.npy {seen}/actions.npy")
        arm = np.load(work / "actions.npy")
        policy = load_policy(policy_file)
        x86 = np.concatenate([policy.act(row[None]) for row in observations])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if policy.metadata.discrete:
        # near-ties flip when the two machines' kernels round one level apart: as export's
        # check, 99% must match where x86's best action leads by more than two output steps
        from edge_rl.converters.verify import decisive_rows

        decisive = decisive_rows(policy.outputs(observations), policy.output_step)
        same = float(np.mean(arm[decisive] == x86[decisive])) if decisive.any() else 1.0
        line = (f"{name}: arm64 and x86 greedy actions identical on {np.mean(arm == x86):.2%} "
                f"of {len(x86)}, on {same:.2%} of the {int(decisive.sum())} where x86's best "
                "action leads by more than two output steps")
        if same < 0.99:
            raise CheckFailed(line + " (needs >= 99% there)")
    else:
        # An action is tanh's int8 output (fixed step 1/128) scaled to the bounds, then
        # requantized to the output tensor's finer step. A kernel that rounds one tanh level
        # differently on arm64 moves the action by one tanh step, and the requantization
        # rounds that once more: one step of the action is the tanh step plus the output's.
        # arm64's and x86's int8 kernels also round some hidden activations one level apart,
        # which now and then carries to the output as a little more than one step; so, as for
        # discrete actions, 99% must be within one step (and none beyond two).
        # A float output stage (edge_rl.converters.flatbuffer) has no tanh or output step:
        # there one level of the last int8 activation moves the pre-tanh value by at most
        # Policy.output_step, and tanh's slope is at most 1.
        half_range = float(np.max(0.5 * (policy.high - policy.low)))
        output_step = policy.output_quantization[0]
        if output_step:
            step = half_range / 128 + output_step
        else:
            step = half_range * policy.output_step
        difference = np.abs(arm.astype(np.float64) - x86).max(axis=-1)
        within = float(np.mean(difference <= step * 1.001 + 1e-6))
        worst = float(difference.max())
        line = (f"{name}: arm64 and x86 actions identical on {np.mean(difference == 0):.2%} "
                f"and within one action step on {within:.2%} of {len(x86)} observations, at "
                f"most {worst:.3g} apart (one action step: {step:.3g})")
        if within < 0.99 or worst > 2 * step:
            raise CheckFailed(line + " (needs >= 99% within one step, none beyond two)")
    return line + f"; arm64 runtime {done.stdout.strip().splitlines()[-1]}"


def eval_on_arm(root: Path, policy_file: Path) -> tuple[str, float]:
    shutil.copy(policy_file, root / HOME.lstrip("/") / "cartpole-int8.tflite")
    done = in_root(root, PI_COMMANDS["eval"])
    text = done.stdout
    score = float(text.split("return: ")[1].split()[0])
    latency = text.split("median inference latency: ")[1].strip()
    return (f"arm64 `edge-rl eval`: return {score:.1f} over 20 episodes, median inference "
            f"latency {latency} (emulated)"), score


def footprints(root: Path, steps: int, cache: Path) -> str:
    """Per env, an arm64 `edge-rl actor` against an x86 `edge-rl learner` on loopback (few
    updates, no evaluations, so it keeps up), measured by `edge-rl bench footprint`: its
    batches must reach the learner's replay and be trained on."""
    results = []
    for env, algo in FOOTPRINT_ALGOS.items():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        token_file = cache / "footprint-token"
        token_file.write_text(secrets.token_hex(16) + "\n")
        log_file = (cache / f"learner-{env}.log").open("wb")
        run_dir = cache / "runs" / f"footprint-{env}"
        # a fresh run each time: the last check's learner left a checkpoint there, and a new
        # learner refuses a folder that holds a run (the actor then waited 180 s for nothing)
        shutil.rmtree(run_dir, ignore_errors=True)
        learner = subprocess.Popen(
            [HOST_BIN / "edge-rl", "learner", "--env", env, "--algo", algo, "--port", str(port),
             "--token-file", token_file, "--out", run_dir,
             "--steps", "1000000000", "--updates-per-step", "0.02", "--warmup-steps", "200",
             "--eval-every", "1000000000", "--checkpoint-every", "1000000000", "--seed", "0"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            done = run([HOST_BIN / "edge-rl", "bench", "footprint", "--learner",
                        f"127.0.0.1:{port}", "--token-file", token_file, "--chroot", root,
                        "--chroot-edge-rl", f"{HOME}/edge-rl/bin/edge-rl", "--steps", str(steps),
                        "--json"], timeout=3600)
        finally:
            learner.send_signal(signal.SIGTERM)
            try:
                learner.wait(timeout=90)
            except subprocess.TimeoutExpired:
                learner.kill()
            log_file.close()
        result = json.loads(done.stdout)
        if not result["learner_updates"]:
            raise CheckFailed(f"{env}: the learner made no updates on the arm64 actor's batches")
        results.append(result)
    (cache / "footprint.json").write_text(json.dumps(results, indent=2) + "\n")
    return "arm64 actor against an x86 learner (emulated):\n" + "\n".join(
        f"  {r['env']}: peak RSS {r['peak_rss_mb']:.1f} MB, first action "
        f"{r['first_action_s']:.2f} s, {r['steps_per_second']:.0f} steps/s, "
        f"{r['batches_accepted']} batches in the learner's replay, "
        f"{r['learner_updates']} updates" for r in results)


def systemd_unit(root: Path) -> str:
    (root / HOME.lstrip("/") / "token").write_text("a-token\n")
    unit = in_root(root, PI_COMMANDS["unit"]).stdout
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    if not start.startswith(f"ExecStart={HOME}/edge-rl/bin/edge-rl actor --learner"):
        raise CheckFailed(f"the unit does not run the installed edge-rl: {start}")
    return f"systemd unit: {start}"


def wait_for(path: Path, timeout: float = 3600) -> None:
    """Until `path` exists; then the x86 side's packages (numpy, edge-rl's [train] extra)
    are installed, and this process's imports must look for them afresh: edge-rl's editable
    install is a .pth file, which Python reads only at start unless told again."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise CheckFailed(f"{path} did not appear in {timeout:.0f} s")
        time.sleep(1)
    for folder in site.getsitepackages():
        site.addsitedir(folder)
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path,
                        default=Path.home() / ".cache" / "edge-rl" / "arm64-check")
    parser.add_argument("--skip-if-unable", action="store_true",
                        help="Exit 0, saying why, where the machine cannot run the check.")
    parser.add_argument("--actor-steps", type=int, default=1000)
    parser.add_argument("--after", type=Path, metavar="FILE",
                        help="Build the arm64 side first, then wait for FILE to exist before "
                             "the x86 side (CI starts the check before its own install)")
    args = parser.parse_args(argv)
    reason = unable_reason()
    if reason:
        print(f"arm64 check skipped: {reason}")
        return 0 if args.skip_if_unable else 2
    # SIGTERM (CI ending early stops this check's process group) unwinds like an error: the
    # `finally`s below stop the learner, which has a session of its own, and unmount /proc
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began = time.monotonic()
    root, wheels = args.cache / "root", args.cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    try:
        ensure_tools()
        ensure_binfmt()
        for what, step in (("arm64 root", lambda: ensure_root(root)),
                           ("aarch64 wheels", lambda: build_wheels(args.cache)),
                           ("install in the root", lambda: install(root, wheels)),
                           ("/proc in the root", lambda: mount_proc(root))):
            t = time.monotonic()
            step()
            report.append(f"{what}: {time.monotonic() - t:.0f} s")
        if args.after:
            t = time.monotonic()
            wait_for(args.after)
            report.append(f"waiting for the x86 install: {time.monotonic() - t:.0f} s")
        policies = x86_policies(args.cache)
        line, score = eval_on_arm(root, policies["cartpole"])
        report.append(line)
        if score < SOLVED:
            raise CheckFailed(f"{line} (needs >= {SOLVED:g})")
        report.append(compare_actions(root, policies["cartpole"], "CartPole int8"))
        report.append(compare_actions(root, policies["pendulum"], "Pendulum TD3 int8"))
        report.append(systemd_unit(root))
        report.append(footprints(root, args.actor_steps, args.cache))
    except (CheckFailed, subprocess.TimeoutExpired) as err:
        print("\n".join(report))
        print(f"FAILED: {err}", file=sys.stderr)
        return 1
    finally:  # so that the cache can be deleted like any folder (CI's is temporary)
        if os.path.ismount(root / "proc"):
            subprocess.run(["umount", "--lazy", str(root / "proc")], check=False)
    print("\n".join(report))
    print(f"arm64 check passed in {time.monotonic() - began:.0f} s")
    (args.cache / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
