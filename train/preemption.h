// Preemption signals: SIGTERM and SIGUSR1, what schedulers send before they kill a job. They
// only set a flag that the training loop reads after every step; the ranks agree on it (one
// all-gather of a number), so that every rank saves and stops after the same step. The signals
// are blocked in every thread and taken synchronously by one waiting thread; the flag is the one
// process-wide state of the trainer: a signal can reach nothing else.
// A signal is a preemption only while the job is healthy (docs/failure.md#signals): one that
// comes while this process is already aborting (mpirun ending the job after a rank's MPI_Abort)
// ends the process at once with the abort's code, and a rank that was waiting in a collective
// when it came, and still waits CollectiveWatchdog::kSignalGraceS later, is ended by its watchdog
// (its peers are gone: the save it would wait for never comes).
#pragma once

namespace zt {

// Preemption signals are never delivered into training's threads: call this first in main(),
// before any thread exists (MPI's, OpenMP's), so that every thread inherits them blocked; the
// trainer then takes them on a thread of its own (sigwait) that only sets the flag the training
// loop reads. A handler run on a compute thread is not safe here: one interrupting oneDNN's GEMM
// kernels corrupted the heap (tests/e2e/checkpoint_resume.sh, preemption cases).
void block_preemption_signals();

// Starts, once per process, the detached thread that waits for the signals (it holds nothing).
void install_preemption_handlers();

// The preemption signal received (SIGTERM or SIGUSR1), or 0 while none has come.
int preemption_signal();

}  // namespace zt
