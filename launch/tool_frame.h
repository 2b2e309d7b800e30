// The shared frame of every zt-* executable: process set-up (thread environment) and the one
// place where a zt::Error becomes a message and an exit code (2 for bad input, 1 otherwise).
#pragma once

#include <functional>

namespace zt {

// Runs body(); prints "<tool>: <message>" as one line on stderr for any error ("<tool>: rank r:
// <message>" when rank >= 0) and returns the exit code to use.
int run_tool(const char* tool, const std::function<int()>& body, int rank = -1);

// Collective over MPI_COMM_WORLD: every rank runs body() (which must not communicate), then the
// ranks agree. If any failed, the lowest failing rank prints its one line (as run_tool) and
// every rank returns that rank's exit code; otherwise all return 0. No rank is left waiting.
int agree_on_exit_code(const char* tool, int rank, int world, const std::function<int()>& body);

// OpenMP workers that spin after a parallel region steal the cores OpenBLAS's threads need
// (MACHINE.md, "Threads"). libgomp reads OMP_WAIT_POLICY once, at load, so when it is unset
// this sets OMP_WAIT_POLICY=PASSIVE and re-executes the program once, before anything else.
void ensure_thread_environment(int argc, char** argv);

}  // namespace zt
