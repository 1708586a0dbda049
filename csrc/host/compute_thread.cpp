// The process's compute thread (compute_thread.h).
#include "host/compute_thread.h"

#include "ggml-cpu.h"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#ifndef _WIN32
#include <pthread.h>
#endif

namespace psl {
namespace {

struct Worker {
    std::mutex turn;                 // one caller at a time
    std::mutex mu;
    std::condition_variable cv;
    const std::function<void()> * job = nullptr;   // the call running (null: none)
    std::exception_ptr error;                      // its exception
    std::thread::id id;

    // Never destroyed (a detached thread may outlive static destructors at exit).
    Worker() {
        std::thread t([this] { loop(); });
        id = t.get_id();
        t.detach();
    }

    void loop() {
        std::unique_lock<std::mutex> lock(mu);
        for (;;) {
            cv.wait(lock, [this] { return job != nullptr; });
            const std::function<void()> * f = job;
            lock.unlock();
            std::exception_ptr e;
            try {
                (*f)();
            } catch (...) {
                e = std::current_exception();
            }
            lock.lock();
            error = e;
            job = nullptr;
            cv.notify_all();
        }
    }

    void run(const std::function<void()> & f) {
        std::lock_guard<std::mutex> one(turn);
        std::unique_lock<std::mutex> lock(mu);
        job = &f;
        cv.notify_all();
        cv.wait(lock, [this] { return job == nullptr; });
        std::exception_ptr e = error;
        error = nullptr;
        lock.unlock();
        if (e) std::rethrow_exception(e);
    }
};

std::mutex g_mu;
Worker * g_worker = nullptr;

#ifndef _WIN32
// The child of a fork has no compute thread (only the forking thread survives): it starts one
// of its own. The old one's memory and (possibly held) locks are left alone.
void forget_after_fork() {
    new (&g_mu) std::mutex();
    g_worker = nullptr;
}
#endif

Worker & worker() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_worker) {
#ifndef _WIN32
        static const bool registered = pthread_atfork(nullptr, nullptr, forget_after_fork) == 0;
        (void) registered;
#endif
        g_worker = new Worker();
    }
    return *g_worker;
}

// Whether ggml's CPU backend runs graphs with OpenMP. Without it (ggml's own threads: the macOS
// and Windows builds) a graph's threads serve the one call whichever thread makes it, and the
// hand-off would only cost.
bool uses_openmp() {
    static const bool on = [] {
        ggml_backend_reg_t reg = ggml_backend_cpu_reg();
        auto features = (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
        if (!features) return true;
        for (const ggml_backend_feature * ft = features(reg); ft && ft->name; ++ft) {
            if (std::strcmp(ft->name, "OPENMP") == 0) return true;
        }
        return false;
    }();
    return on;
}

}  // namespace

void on_compute_thread(const std::function<void()> & f) {
    if (!uses_openmp()) {
        f();
        return;
    }
    Worker & w = worker();
    if (std::this_thread::get_id() == w.id) {
        f();
        return;
    }
    w.run(f);
}

ggml_status compute_graph(ggml_backend_sched_t sched, ggml_cgraph * gf) {
    ggml_status st = GGML_STATUS_FAILED;
    on_compute_thread([&] { st = ggml_backend_sched_graph_compute(sched, gf); });
    return st;
}

void upload(ggml_tensor * t, const void * data, size_t offset, size_t size) {
    on_compute_thread([&] { ggml_backend_tensor_set(t, data, offset, size); });
}

}  // namespace psl
