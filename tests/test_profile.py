"""Nsight Compute in the refine prompt: ncu's CSV into a Profile, the Profile into the feedback, nothing
without a GPU, and the profile jail: its own network namespace (loopback only) and /dev/shm, nothing more."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator import CandidateJob, EvalSettings, Evidence, KernelProfile, Profile, Status, TimingStats, Verdict, profile
from evaluator.contracts import SpeedOfLight, TimingReport
from evaluator.parent.jail_spec import jail_spec
from evaluator.parent.profiling import METRICS, parse_csv
from evaluator.sandbox.spawn import _JAIL, ROOT, scrubbed_env
from prompts import Turn, chat_messages, render_feedback
from reference_problems import resolve_problem

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _rows(launch: int, kernel: str, values: dict[str, tuple[str, str]]) -> list[str]:
    return [f'"{launch}","616","python","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{name}","{unit}","{value}"' for name, (unit, value) in values.items()]


def _launch(time_ns: str, sm: str, dram: str, regs: str, long_sb: str, barrier: str) -> dict[str, tuple[str, str]]:
    return {"gpu__time_duration.sum": ("nsecond", time_ns),
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", sm),
            "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", dram),
            "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": ("%", "22.4"),
            "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "71.8"),
            "launch__registers_per_thread": ("register/thread", regs),
            "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": ("%", long_sb),
            "smsp__warp_issue_stalled_barrier_per_warp_active.pct": ("%", barrier),
            "smsp__warp_issue_stalled_not_selected_per_warp_active.pct": ("%", "n/a")}


# 2 calls: each launches k twice and a copy kernel once; ncu's own lines around the CSV, as with --log-file
NCU_LOG = "\n".join([
    "==PROF== Connected to process 26 (/usr/bin/python3.11)", HEADER,
    *_rows(1, "k(float *, int)", _launch("53,120", "30.0", "60.0", "32", "40.0", "5.0")),
    *_rows(2, "k(float *, int)", _launch("26,560", "36.0", "66.0", "32", "52.0", "8.0")),
    *_rows(3, "void at::native::copy_kernel<float>(float *)", _launch("4,000", "10.0", "80.0", "16", "9.0", "1.0")),
    *_rows(4, "k(float *, int)", _launch("53,120", "30.0", "60.0", "32", "40.0", "5.0")),
    *_rows(5, "k(float *, int)", _launch("26,560", "36.0", "66.0", "32", "52.0", "8.0")),
    *_rows(6, "void at::native::copy_kernel<float>(float *)", _launch("4,000", "10.0", "80.0", "16", "9.0", "1.0")),
    "==PROF== Disconnected from process 26", ""])


def test_ncu_csv_becomes_kernels_per_call_time_weighted_largest_first():
    kernels = parse_csv(NCU_LOG, calls=2)
    assert [k.name for k in kernels] == ["k(float *, int)", "void at::native::copy_kernel<float>(float *)"]
    k, copy = kernels
    assert k.launches == 2 and copy.launches == 1
    assert k.ms == pytest.approx((53120 + 26560) * 1e-6)  # per call: thousands separators read
    assert k.share == pytest.approx(79680 / 83680) and copy.share == pytest.approx(4000 / 83680)
    assert k.sm_pct == pytest.approx((30 * 53120 + 36 * 26560) / 79680)  # weighted by each launch's time
    assert k.dram_pct == pytest.approx(62.0) and k.l2_pct == pytest.approx(22.4) and k.occupancy_pct == pytest.approx(71.8)
    assert k.registers == 32 and copy.registers == 16
    assert list(k.stalls) == ["long scoreboard", "barrier"]  # largest first; "n/a" left out
    assert k.stalls["long scoreboard"] == pytest.approx(44.0)


def test_ncu_output_without_rows_gives_no_kernels():
    assert parse_csv("==PROF== Connected to process 26\n==WARNING== No kernels were profiled.\n", calls=3) == []
    assert len(METRICS) == len(set(METRICS)) == 13


def _correct_verdict() -> Verdict:
    ms = TimingStats(median_ms=0.5, mean_ms=0.5, min_ms=0.5, max_ms=0.5, p20_ms=0.5, p80_ms=0.5, std_ms=0.0, cv=0.0,
                     reps=10, method="cuda_events+l2_flush")
    sol = SpeedOfLight(ms=0.1, bound="bandwidth", arithmetic="8 MB / 3.35 TB/s", hardware="H100: 3.35 TB/s")
    return Verdict(status=Status.CORRECT, problem="relu", solution_sha256="ab" * 32, solution_path="/gen/relu/c.py",
                   device="cuda", device_name="NVIDIA H100", candidate=ms, reference=ms.model_copy(update={"median_ms": 1.0}),
                   speedup=2.0, evidence=Evidence(cause="correct", timing=TimingReport(method="cuda_events",
                                                                                        calls=10, speed_of_light=sol)))


def test_the_feedback_shows_the_top_kernels_after_the_speed_of_light_and_nothing_without_a_profile():
    verdict, kernels = _correct_verdict(), parse_csv(NCU_LOG, calls=2)
    before = render_feedback(verdict, "x = 1\n")
    assert render_feedback(verdict, "x = 1\n", Profile(said="ncu not found on PATH")) == before
    assert render_feedback(verdict, "x = 1\n", None) == before
    text = render_feedback(verdict, "x = 1\n", Profile(kernels=kernels, calls=2, gpu_ms=0.08368))
    assert "Nsight Compute" not in before and "ncu" not in before
    assert text.index("speed of light") < text.index("Nsight Compute, per kernel of one forward call")
    line = next(x for x in text.splitlines() if x.startswith("- `k(float *, int)`"))
    assert line == ("- `k(float *, int)` 95% (2 launches): SM throughput 32% of peak, DRAM throughput 62%, L2 22%, "
                    "achieved occupancy 72%, 32 registers/thread; top stalls (share of active warps' cycles): "
                    "long scoreboard 44%, barrier 6%.")
    assert "- `void at::native::copy_kernel<float>(float *)` 5%: SM throughput 10% of peak" in text
    with_profile = chat_messages(resolve_problem("relu"), [Turn(source="x = 1\n", verdict=verdict,
                                                                profile=Profile(kernels=kernels))])
    assert "Nsight Compute" in with_profile[-1]["content"]


def test_only_three_kernels_are_shown():
    kernels = [KernelProfile(name=f"k{i}", launches=1, ms=1.0, share=0.25) for i in range(4)]
    text = render_feedback(_correct_verdict(), "", Profile(kernels=kernels))
    assert "`k2`" in text and "`k3`" not in text


def test_a_cpu_job_gets_a_profile_that_says_why_without_starting_ncu(tmp_path, monkeypatch):
    calls = tmp_path / "ncu-called"
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ntouch {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    problem = resolve_problem("relu")
    job = CandidateJob(path=problem.path, problem=problem)
    said = profile(job, EvalSettings(device="cpu"))
    assert said.kernels == [] and said.said.startswith("no CUDA") and not calls.exists()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert profile(job, EvalSettings(device="cuda")).said == "ncu not found on PATH"


# -- the profile jail -----------------------------------------------------------------------------------------

_CHILD = '''
import json, os, runpy, socket
layers = json.loads(os.environ["KFORGE_JAIL"])
network = layers.get("network", "").startswith("on")  # what evaluator.child.main decides its filter by
out = {"layers": layers, "confined": runpy.run_path(os.environ["KFORGE_CONFINE"])["forbid_touching_parent"](network=network)}
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
    out["host"] = "connected"
except OSError as exc:
    out["host"] = exc.errno
try:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname(), timeout=2)
    client.sendall(b"hi")
    out["own"] = server.accept()[0].recv(2).decode()
except OSError as exc:
    out["own"] = exc.errno
try:
    with open("/dev/shm/NAME", "w") as fh:
        fh.write("x")
    out["shm"] = "wrote"
except OSError as exc:
    out["shm"] = exc.errno
print(json.dumps(out))
'''


def _jailed_child(tmp_path: Path, port: int, profile_jail: bool) -> subprocess.CompletedProcess:
    spec = jail_spec([tmp_path], []) | {"profile": profile_jail}
    code = _CHILD.replace("PORT", str(port)).replace("NAME", f"kforge-profile-test-{os.getpid()}")
    env = scrubbed_env(tmp_path, tmp_path, "t") | {"KFORGE_CONFINE": str(ROOT / "evaluator" / "sandbox" / "seccomp.py")}
    return subprocess.run([sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, "-c", code], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)


def test_the_profile_jail_gives_its_own_loopback_and_dev_shm_and_a_candidate_child_still_gets_no_socket(tmp_path):
    """A TCP listener of the host on 127.0.0.1 is unreachable from the profile jail (another namespace), while
    the child's own loopback works and its /dev/shm is private; a normal child still cannot make an IPv4 socket."""
    host = socket.create_server(("127.0.0.1", 0))
    host.settimeout(0.5)
    shm = Path(f"/dev/shm/kforge-profile-test-{os.getpid()}")
    try:
        proc = _jailed_child(tmp_path, host.getsockname()[1], profile_jail=True)
        if proc.returncode == 126:
            pytest.skip(f"this machine refuses the profile jail: {proc.stderr.strip()}")
        out = json.loads(proc.stdout)
        assert out["layers"]["network"].startswith("on (own namespace") and out["layers"]["shm"].startswith("on")
        assert out["confined"] is True
        assert out["host"] == 111  # ECONNREFUSED: nothing listens on this namespace's loopback
        with pytest.raises(TimeoutError):
            host.accept()  # and nothing reached the host's
        assert out["own"] == "hi" and out["shm"] == "wrote" and not shm.exists()

        normal = json.loads(_jailed_child(tmp_path, host.getsockname()[1], profile_jail=False).stdout)
        assert "network" not in normal["layers"] and normal["confined"] is True
        assert normal["host"] == 13 and normal["own"] == 13 and normal["shm"] == 13  # EACCES: seccomp, Landlock
    finally:
        host.close()
        shm.unlink(missing_ok=True)


def test_a_profile_request_is_part_of_the_protocol_and_no_other_role_runs_in_the_profile_jail(tmp_path):
    """The child decides its seccomp variant by the jail's report alone; it then refuses every role but `profile`
    (an introspect child here, real and jailed), so no candidate or reference child ever runs with the network on."""
    from evaluator.contracts import Limits
    from evaluator.protocol import IntrospectRequest, ProfileRequest, read_request
    from evaluator.sandbox.spawn import Child

    request = ProfileRequest(problem_path="p.py", candidate_path="c.py", init_seed=1, input_seed=2, calls=3, precision="fp32")
    assert read_request(request.model_dump_json().encode()) == request
    problem = resolve_problem("relu")
    child = Child(tmp_path, tmp_path / "build", Limits(timeout_s=120), cap_address_space=True,
                  jail=jail_spec([tmp_path], [problem.path]) | {"profile": True})
    child.begin(IntrospectRequest(problem_paths=[str(problem.path)]))
    result = child.finish()
    if result.returncode == 126:
        pytest.skip(f"this machine refuses the profile jail: {result.log_tail(300)}")
    assert result.last("measured") is None
    assert "must not run in the profile jail" in result.last("error")["message"], result.log_tail(2000)


def test_a_scratch_under_dev_shm_is_refused_by_the_profile_jail_and_profiles_keep_theirs_elsewhere(tmp_path, monkeypatch):
    """The profile jail mounts a private tmpfs on /dev/shm, which would hide a scratch folder made there (the GPU
    host's scripts set TMPDIR=/dev/shm): the jail says so instead of a child that cannot find its folder, and a
    profile's scratch goes to /tmp when the temporary folder is in /dev/shm."""
    from evaluator.parent.profiling import scratch_parent

    monkeypatch.setattr("tempfile.tempdir", "/dev/shm")
    assert scratch_parent() == "/tmp"
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert scratch_parent() == os.path.realpath(tmp_path)

    shm = Path(f"/dev/shm/kforge-profile-scratch-{os.getpid()}")
    shm.mkdir(mode=0o711)
    try:
        proc = _jailed_child(shm, 1, profile_jail=True)
    finally:
        shm.rmdir()
    assert proc.returncode != 0 and proc.stdout == ""
    if "lies under /dev/shm" not in proc.stderr and "no private mount namespace" in proc.stderr:
        pytest.skip(f"this machine refuses the profile jail: {proc.stderr.strip()}")
    assert f"{shm} lies under /dev/shm, which the profile jail replaces" in proc.stderr


_TARGET = '''
import subprocess, sys
code = """
import json, os, sys
sys.path.insert(0, ROOT)
def opens(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
        return "opened"
    except OSError as exc:
        return exc.errno
out = {"own": opens(f"/proc/self/task/{os.getpid()}/comm"), "jail_init": opens("/proc/1/comm")}
from evaluator.sandbox.jail import narrow_profile_target
out["narrowed"] = narrow_profile_target()
out |= {"own_after": opens(f"/proc/self/task/{os.getpid()}/comm"), "jail_init_after": opens("/proc/1/comm")}
print(json.dumps(out))
""".replace("ROOT", repr(sys.argv[1]))
print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
'''


def test_a_process_the_profile_jail_starts_names_its_threads_and_then_narrows_proc_to_its_own(tmp_path):
    """ncu starts the profiled child as a process of its own, whose pid the jail cannot name in advance: the
    jail's layer lets its processes write their /proc entries (the CUDA driver names its threads there and fails
    cuInit, error 304, where it cannot: what the H100 showed), and the target's own layer, stacked before it
    loads the candidate, narrows that to its own pid again (ncu's /proc is closed to it)."""
    spec = jail_spec([tmp_path], []) | {"profile": True}
    env = scrubbed_env(tmp_path, tmp_path, "t") | {"KFORGE_CONFINE": str(ROOT / "evaluator" / "sandbox" / "seccomp.py")}
    proc = subprocess.run([sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, "-c", _TARGET, str(ROOT)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode == 126:
        pytest.skip(f"this machine refuses the profile jail: {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    assert out["own"] == "opened" and out["jail_init"] == "opened", out
    assert out["narrowed"].startswith("on (ABI") and out["own_after"] == "opened" and out["jail_init_after"] == 13, out
