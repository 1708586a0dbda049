// Errors inside the core are psl::Error exceptions carrying a psl_status; the C API boundary
// (api.cpp) turns them into a status code plus the thread's last-error message.
#pragma once

#include "pyllamaspec.h"

#include <stdexcept>
#include <string>

namespace psl {

struct Error : std::runtime_error {
    psl_status status;
    Error(psl_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

[[noreturn]] void fail(psl_status s, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// The last message ggml logged at error level on this thread (gguf parse failures say why
// there); cleared by take_ggml_error().
std::string take_ggml_error();
// Routes ggml's log to the above (once per process; every path that parses a file calls it).
void install_ggml_logger();
void set_last_error(const std::string & msg);
const char * last_error();
void set_verbose(bool v);

// Runs f, mapping exceptions to a status and the last-error message.
template <typename F> psl_status guard(F && f) noexcept {
    try {
        f();
        return PSL_OK;
    } catch (const Error & e) {
        set_last_error(e.what());
        return e.status;
    } catch (const std::bad_alloc &) {
        set_last_error("out of memory");
        return PSL_ERR_OUT_OF_MEMORY;
    } catch (const std::exception & e) {
        set_last_error(std::string("internal error: ") + e.what());
        return PSL_ERR_INTERNAL;
    } catch (...) {
        set_last_error("internal error: unknown exception");
        return PSL_ERR_INTERNAL;
    }
}

}  // namespace psl
