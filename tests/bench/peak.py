"""`python -m tests.bench.peak MODULE ARGS...`: run MODULE as `__main__` and, on exit, write this
process's own peak RSS (VmHWM, in kB) to $BENCH_PEAK_FILE.

A child's rusage cannot serve: its peak includes the parent's resident memory at the fork
(measured: a run that never passed 0.8 GB reported 1.0 GB after an in-process connectorx copy
in the parent), while VmHWM belongs to the memory the program itself was given at exec."""
import atexit
import os
import runpy
import sys


def record() -> None:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["BENCH_PEAK_FILE"], "w") as out:
        out.write(peak)


def recorded(exit_now):
    """os._exit, recording the peak first (the `cdc-sql` command ends through it)."""
    def exit_after_recording(code: int) -> None:
        record()
        exit_now(code)
    return exit_after_recording


if __name__ == "__main__":
    atexit.register(record)
    os._exit = recorded(os._exit)
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
