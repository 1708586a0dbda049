// Acceptance of a token tree (psl_sampler_verify_tree), walking down from the root on the
// target's rows; the rule per node is in the header's comment and below.
//
// Sampled with draft distributions: recursive rejection sampling over the siblings in their draw
// order (Jeon et al. 2024, "Recursive Speculative Decoding: Accelerating LLM Inference via
// Sampling Without Replacement", Thm. 3.1; SpecTr's k-sequential selection, Sun et al. 2023;
// SpecInfer's multi-step speculative sampling, Miao et al. 2024). With p_1 = p and q_1 = q, x_i
// is accepted with probability min(1, p_i(x_i) / q_i(x_i)); on rejection
// p_{i+1} = norm(max(0, p_i - q_i)) and q_{i+1} = q_i without x_i, renormalized (the law of the
// next draw without replacement); all rejected: the token is drawn from p_{m+1}. Each step is
// one ordinary speculative step, exact for any draft distribution, whose residual is served by
// the next sibling: the token is distributed as p.
//
// p_i lives on the candidates of the node's adjusted row (max(0, p - q) is zero wherever p is),
// so after the row's adjustment the walk costs O(candidates) per sibling, not O(n_vocab).
#include "engine/sampling.h"
#include "error.h"

#include <algorithm>
#include <cmath>
#include <vector>

using psl::fail;
using psl::sampling::GrammarMark;
using psl::sampling::HistoryMark;

namespace {

// Validates the tree and builds its children lists in the sampler's scratch: the children of
// node v (v = -1: the root) are kids[kid_start[v + 1] .. kid_start[v + 2]), in node order.
void index_tree(psl_sampler & s, const int32_t * tokens, const int32_t * parents, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
        if (parents[i] < -1 || parents[i] >= i) {
            fail(PSL_ERR_INVALID_ARGUMENT, "node %d: parent %d must be -1 (the root) or a node before it", i, parents[i]);
        }
        if (tokens[i] < 0 || tokens[i] >= s.n_vocab) fail(PSL_ERR_OUT_OF_RANGE, "node %d: token %d out of range", i, tokens[i]);
    }
    s.kid_start.assign((size_t) n + 2, 0);
    for (int32_t i = 0; i < n; ++i) ++s.kid_start[(size_t) parents[i] + 2];
    for (size_t v = 2; v < s.kid_start.size(); ++v) s.kid_start[v] += s.kid_start[v - 1];
    s.kids.resize((size_t) n);
    std::vector<int32_t> fill(s.kid_start.begin(), s.kid_start.end() - 1);
    for (int32_t i = 0; i < n; ++i) s.kids[(size_t) fill[(size_t) parents[i] + 1]++] = i;
}

// The sum of a draft row: float lanes (independent adds the compiler vectorizes) in blocks summed
// in double: over a 262k vocabulary ~15 us where one float chain of adds takes ~90 (g++ -O3).
double row_mass(const float * q, int32_t V) {
    double sum = 0.0;
    for (int32_t i = 0; i < V; i += 256) {
        float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        const int32_t e = std::min(V, i + 256);
        int32_t j = i;
        for (; j + 8 <= e; j += 8) {
            for (int k = 0; k < 8; ++k) lane[k] += q[j + k];
        }
        for (; j < e; ++j) lane[0] += q[j];
        for (float l : lane) sum += l;
    }
    return sum;
}

// Draws a candidate's id from weights w (total mass w_total > 0), by inverse CDF.
int32_t draw_weighted(psl_sampler & s, const std::vector<double> & w, double w_total) {
    const double u = s.rng.uniform() * w_total;
    double cum = 0.0;
    size_t last = 0;
    for (size_t j = 0; j < w.size(); ++j) {
        if (w[j] <= 0.0) continue;
        cum += w[j];
        last = j;
        if (u < cum) break;
    }
    return s.cand[last];
}

// Recursive rejection sampling at one node (the file's comment): the child accepted, or -1
// with the token drawn from the last residual in *next. q_row: the distribution the m children
// were drawn from, without replacement, in node order.
int32_t recursive_rejection(psl_sampler & s, const float * row, const int32_t * tokens, const int32_t * kid,
                            int32_t m, const float * q_row, int32_t * next) {
    s.adjust(row);
    const size_t nc = s.cand.size();
    std::vector<double> & p = s.tree_p, & r = s.tree_r, & qc = s.tree_q;
    p.assign(s.cand_p.begin(), s.cand_p.end());
    double p_mass = 0.0;
    for (double v : p) p_mass += v;
    double q_mass = 0.0;                  // q_i's mass before normalization: the row's, less the siblings tried
    if (m > 0) {
        q_mass = row_mass(q_row, s.n_vocab);
        if (!(q_mass > 0.0) || !std::isfinite(q_mass)) {
            fail(PSL_ERR_INVALID_ARGUMENT, "node %d: its draft row has no finite positive mass", kid[0]);
        }
        qc.resize(nc);
        for (size_t j = 0; j < nc; ++j) qc[j] = q_row[s.cand[j]];
    }
    std::vector<int32_t> tried;
    for (int32_t i = 0; i < m; ++i) {
        const int32_t x = tokens[kid[i]];
        const bool again = std::find(tried.begin(), tried.end(), x) != tried.end();   // q_i(x) is 0
        const size_t at = (size_t) (std::find(s.cand.begin(), s.cand.end(), x) - s.cand.begin());
        const double qx = again ? 0.0 : q_row[x] / q_mass;
        const double px = at < nc ? p[at] / p_mass : 0.0;
        if (qx > 0.0 && s.rng.uniform() * qx < px) return kid[i];
        double r_mass = 0.0;
        r.resize(nc);
        for (size_t j = 0; j < nc; ++j) {
            r[j] = std::max(0.0, p[j] / p_mass - qc[j] / q_mass);
            r_mass += r[j];
        }
        if (r_mass > 0.0) {               // p_i == q_i up to rounding leaves none: p_i is then right
            p.swap(r);
            p_mass = r_mass;
        }
        if (!again) {
            tried.push_back(x);
            q_mass -= q_row[x];
            if (at < nc) qc[at] = 0.0;
        }
        if (!(q_mass > 0.0)) break;       // q has nothing left to draw: no later sibling came from it
    }
    *next = draw_weighted(s, p, p_mass);
    return -1;
}

// One node's step: the child followed, or -1 with the next token in *next.
int32_t step(psl_sampler & s, const float * row, const int32_t * tokens, const float * draft_probs, int32_t node,
             int32_t * next) {
    const int32_t * kid = s.kids.data() + s.kid_start[(size_t) node + 1];
    const int32_t m = s.kid_start[(size_t) node + 2] - s.kid_start[(size_t) node + 1];
    if (s.greedy() || !draft_probs) {     // greedy: the argmax; a deterministic drafter: y ~ p
        const int32_t y = s.greedy() ? s.pick_greedy(row) : s.draw_adjusted(row);
        for (int32_t i = 0; i < m; ++i) {
            if (tokens[kid[i]] == y) return kid[i];
        }
        *next = y;
        return -1;
    }
    const float * q_row = m > 0 ? draft_probs + (size_t) kid[0] * (size_t) s.n_vocab : nullptr;
    return recursive_rejection(s, row, tokens, kid, m, q_row, next);
}

}  // namespace

// The walk (the header's psl_sampler_verify_tree; the arguments checked but the tree's shape).
void psl::sampling::verify_tree(psl_sampler & s, const float * target_logits, const int32_t * tokens,
                                const int32_t * parents, const float * draft_probs, int32_t n, int32_t * path,
                                int32_t * n_path, int32_t * next_token) {
    index_tree(s, tokens, parents, n);
    const size_t V = (size_t) s.n_vocab;
    const HistoryMark mark(s.pen.history);
    const GrammarMark gmark(s.grammar);
    int32_t node = -1, len = 0;
    for (;;) {
        const float * row = s.pen.apply(target_logits + (size_t) (node + 1) * V, (int32_t) V);
        int32_t nxt = 0;
        const int32_t child = step(s, row, tokens, draft_probs, node, &nxt);
        if (child < 0) {
            *n_path = len;
            *next_token = nxt;
            return;
        }
        path[len++] = child;              // the text the child's row continues
        node = child;
        s.pen.history.push_back(tokens[child]);
        if (s.grammar && !s.grammar->accept(tokens[child])) {
            fail(PSL_ERR_INTERNAL, "tree token %d was accepted but the grammar refuses it", tokens[child]);
        }
    }
}
