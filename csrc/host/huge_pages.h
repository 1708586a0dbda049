// Transparent huge pages for the buffers every token reads (copied weights, the KV cache).
#pragma once

#include "ggml-backend.h"

namespace psl {

// Asks the kernel to back a host buffer with 2 MiB pages (Linux MADV_HUGEPAGE; call it before
// the buffer is first written): decoding streams every weight once per token, and with 4 KiB
// pages that is one TLB miss per page. Where THP is "madvise" (most distributions) nothing
// else gets them; with "always" this changes nothing. No effect on a device buffer, elsewhere
// than Linux, or with PYLLAMASPEC_HUGE_PAGES=0. Mapped weights (mmap, the default) cannot: the
// page cache of a regular file is not collapsed into huge pages on request.
void advise_huge_pages(ggml_backend_buffer_t buf);

}  // namespace psl
