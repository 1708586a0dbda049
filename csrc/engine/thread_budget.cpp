// Threads capped at the cores other processes leave free (thread_budget.h).
#include "engine/thread_budget.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#ifdef __linux__
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace psl {
namespace {

bool enabled() {
    static const bool on = [] {
        const char * v = std::getenv("PYLLAMASPEC_THREAD_CAP");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    return on;
}

double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

#ifdef __linux__
struct Sample {
    double t = 0;      // steady clock, s
    double busy = 0;   // CPU time spent by everyone on the CPUs we may use, s
    double ours = 0;   // this process's CPU time, s
    int n_cpus = 0;    // CPUs we may use
};

// Busy time from /proc/stat's per-CPU lines (user nice system idle iowait irq softirq steal):
// everything but idle and iowait; steal is time a hypervisor gave to other machines.
bool read_sample(Sample & s) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    const bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
    FILE * f = std::fopen("/proc/stat", "r");
    if (!f) return false;
    static const double tick = 1.0 / (double) std::max(1L, sysconf(_SC_CLK_TCK));
    char line[512];
    unsigned long long busy = 0;
    int n = 0;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "cpu", 3) != 0) break;
        int cpu = -1;
        unsigned long long v[8] = {0};
        if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3],
                        &v[4], &v[5], &v[6], &v[7]) < 5) {
            continue;   // the "cpu " total line
        }
        if (have_mask && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask))) continue;
        busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        ++n;
    }
    std::fclose(f);
    struct rusage ru;
    if (n == 0 || getrusage(RUSAGE_SELF, &ru) != 0) return false;
    s.t = now_s();
    s.busy = (double) busy * tick;
    s.ours = (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    s.n_cpus = n;
    return true;
}

std::mutex g_mu;
Sample g_last;
double g_elsewhere = 0;   // cores busy with other processes' work, last window
int g_n_cpus = 0;
#endif

}  // namespace

int32_t threads_for_now(int32_t wanted) {
#ifdef __linux__
    if (wanted <= 1 || !enabled()) return wanted;
    std::lock_guard<std::mutex> lock(g_mu);
    if (now_s() - g_last.t >= 0.25) {
        Sample s;
        if (read_sample(s)) {
            if (g_last.t > 0) {
                const double dt = s.t - g_last.t;
                g_elsewhere = std::max(0.0, ((s.busy - g_last.busy) - (s.ours - g_last.ours)) / dt);
            }
            g_last = s;
            g_n_cpus = s.n_cpus;
        }
    }
    if (g_n_cpus == 0) return wanted;
    // free cores, rounded to the nearest: a core half used by others is not ours to spin on
    const int32_t free = (int32_t) std::lround(std::max(0.0, g_n_cpus - g_elsewhere));
    return std::clamp(free, (int32_t) 1, wanted);
#else
    return wanted;
#endif
}

double cores_busy_elsewhere() {
#ifdef __linux__
    std::lock_guard<std::mutex> lock(g_mu);
    return g_elsewhere;
#else
    return 0.0;
#endif
}

}  // namespace psl
