// One thread computes for the whole process. ggml's CPU backend runs a graph as an OpenMP
// parallel region, and libgomp gives every thread that opens one a team of its own, counting the
// threads of all teams: once they outnumber the cores, every barrier (ggml waits at one after
// each graph node) spins 100 rounds instead of 300,000 before it sleeps in the kernel. A model
// loaded on one thread (its weights' conversion opens a region) and run on another (the
// server's worker, a user's thread) thus decoded SmolLM2 at 9.5 ms a token against 5.3 on the
// loading thread, 2 threads on 2 cores. Work that may open a region (graph computations,
// uploads into a converting buffer) runs here, so one team serves every model and thread.
#pragma once

#include <functional>

#include "ggml-backend.h"

namespace psl {

// Runs f on the compute thread (started on first use) and waits for it; f's exception is
// rethrown here. Callers on several threads take turns. On the compute thread itself, or where
// ggml's CPU backend has no OpenMP, f runs at once. Thread-safe; a forked child starts its own
// thread.
void on_compute_thread(const std::function<void()> & f);

// ggml_backend_sched_graph_compute(sched, gf) on the compute thread.
ggml_status compute_graph(ggml_backend_sched_t sched, ggml_cgraph * gf);

// ggml_backend_tensor_set on the compute thread (a repacking or AMX buffer converts the data
// in parallel as it takes it).
void upload(ggml_tensor * t, const void * data, size_t offset, size_t size);

}  // namespace psl
