// Transparent huge pages for host buffers (huge_pages.h).
#include "host/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace psl {

void advise_huge_pages(ggml_backend_buffer_t buf) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    static const bool on = [] {
        const char * v = std::getenv("PYLLAMASPEC_HUGE_PAGES");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    if (!on || !buf || !ggml_backend_buffer_is_host(buf)) return;
    constexpr uintptr_t huge = (uintptr_t) 2 << 20;
    uintptr_t b = (uintptr_t) ggml_backend_buffer_get_base(buf);
    const uintptr_t e = (b + ggml_backend_buffer_get_size(buf)) & ~(huge - 1);
    b = (b + huge - 1) & ~(huge - 1);   // only whole huge pages inside the buffer
    if (e > b) madvise((void *) b, e - b, MADV_HUGEPAGE);   // advice: a refusal changes nothing
#else
    (void) buf;
#endif
}

}  // namespace psl
