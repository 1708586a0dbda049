// A hybrid context's rollback: the ring of recurrent states (recurrent_state.h) serves recent
// truncations; anything further back is rebuilt by replaying the kept tokens before the next eval.
#include "engine/context.h"

#include "api/error.h"

#include <algorithm>
#include <cstdlib>

using namespace psl;

int32_t psl::recurrent_snapshots() {
    const char * env = std::getenv("PYLLAMASPEC_RS_SNAPSHOTS");
    if (!env || !*env) return 17;
    char * end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end || n < 1 || n > 4096) {
        fail(PSL_ERR_INVALID_ARGUMENT, "PYLLAMASPEC_RS_SNAPSHOTS must be an integer in [1, 4096], got '%s'", env);
    }
    return (int32_t) n;
}

void psl_context::rollback_recurrent(int32_t n_keep) {
    if (rs_replay >= 0) {   // already stale: the replay just stops earlier
        rs_replay = std::min(rs_replay, n_keep);
        if (rs_replay == 0) rs_replay = -1, rs->rollback(0);
        return;
    }
    if (!rs->rollback(n_keep)) rs_replay = n_keep;
}

void psl_context::replay_recurrent() {
    if (rs_replay < 0) return;
    const int32_t n = rs_replay;
    std::vector<int32_t> toks(rs->history().begin(), rs->history().begin() + n);
    kv->set_used(0);
    rs->rollback(0);
    try {
        for (int32_t off = 0; off < n; off += params.n_batch) {
            eval_batch(toks.data() + off, std::min(params.n_batch, n - off), PSL_LOGITS_NONE, nullptr);
        }
    } catch (...) {
        kv->set_used(n);   // still stale: the next eval tries again
        rs->set_history(std::move(toks));
        throw;
    }
    rs_replay = -1;
}
