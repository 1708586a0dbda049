#include "error.h"

#include "ggml.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace psl {

namespace {
thread_local std::string t_last_error;
thread_local std::string t_ggml_error;
std::atomic<bool> g_verbose{false};

void ggml_logger(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        // ggml logs one message in pieces sometimes; keep the latest whole line
        if (level == GGML_LOG_LEVEL_ERROR) {
            t_ggml_error = text;
            while (!t_ggml_error.empty() && (t_ggml_error.back() == '\n' || t_ggml_error.back() == ' ')) {
                t_ggml_error.pop_back();
            }
        }
    }
    if (g_verbose.load(std::memory_order_relaxed)) {
        fputs(text, stderr);
        fflush(stderr);
    }
}
}  // namespace

void fail(psl_status s, const char * fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    throw Error(s, buf);
}

std::string take_ggml_error() {
    std::string s;
    s.swap(t_ggml_error);
    return s;
}

void install_ggml_logger() {
    static std::once_flag once;
    std::call_once(once, [] { ggml_log_set(ggml_logger, nullptr); });
}

void set_verbose(bool v) { g_verbose = v; }

void set_last_error(const std::string & msg) { t_last_error = msg; }

const char * last_error() { return t_last_error.c_str(); }

}  // namespace psl
