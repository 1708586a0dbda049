// How many CPU threads an evaluation runs now. ggml's CPU threads wait for one another after
// every graph node by spinning (OpenMP's barrier spins before it sleeps; ggml's own threadpool
// only spins). When other processes keep the cores busy, a waiting thread holds a core its
// sibling needs, every node then waits for the scheduler, and a 2-thread evaluation on a busy
// 2-core machine ran 60x slower than alone (scripts/bench_contention.py). With as many threads
// as cores are free, speed falls in proportion to the share of the machine instead.
#pragma once

#include <cstdint>

namespace psl {

// Of `wanted` threads, how many to run: all of them while the machine has room, else as many as
// the cores other processes leave free (at least one). On Linux it samples the machine's busy time
// (/proc/stat, over the CPUs this process may use) against this process's own, over windows of
// at least 250 ms; elsewhere, or with PYLLAMASPEC_THREAD_CAP=0 in the environment, it returns
// `wanted`. Thread-safe; costs a file read every 250 ms at most.
int32_t threads_for_now(int32_t wanted);

// The cores other processes kept busy over the last window (0 before two samples, or where it
// cannot tell): for tests and diagnostics.
double cores_busy_elsewhere();

}  // namespace psl
