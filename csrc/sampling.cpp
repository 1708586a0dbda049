// Sampling and speculative acceptance, on the caller's logits buffers.
//
// The adjusted distribution is llama.cpp's default chain: top-k, top-p, min-p (on the softmax
// of the raw logits), then temperature. Speculative verification (Leviathan et al. 2023,
// Chen et al. 2023) uses the same adjusted distributions for the draft (q) and the target (p),
// which is what keeps the output distribution exactly the target's.
#include "error.h"
#include "pyllamaspec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

// xoshiro256** seeded through splitmix64: the same stream on every platform and compiler
// (std:: distributions are not specified bit for bit).
struct Rng {
    uint64_t s[4];
    void seed(uint64_t x) {
        for (uint64_t & v : s) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            v = z ^ (z >> 31);
        }
    }
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t next() {
        const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
        return r;
    }
    double uniform() { return (double) (next() >> 11) * 0x1.0p-53; }   // [0, 1)
};

int32_t argmax(const float * x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
        if (x[i] > x[best]) best = i;
    }
    return best;
}

}  // namespace

struct psl_sampler {
    int32_t n_vocab;
    psl_sampling_params params;
    Rng rng;
    std::vector<int32_t> cand;    // kept candidate ids
    std::vector<float> cand_p;    // their probabilities (sum 1)
    std::vector<float> row_p;     // a dense p row (verify)

    bool greedy() const { return params.temperature <= 0.0f; }

    // Candidates and their adjusted probabilities for one logits row.
    void adjust(const float * logits) {
        const int32_t V = n_vocab;
        const auto by_logit = [logits](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        };
        cand.resize(V);
        std::iota(cand.begin(), cand.end(), 0);
        size_t n = V;
        bool sorted = false;

        if (greedy()) {
            cand[0] = argmax(logits, V);
            cand.resize(1);
            cand_p.assign(1, 1.0f);
            return;
        }
        if (params.top_k > 0 && params.top_k < V) {
            n = (size_t) params.top_k;
            std::nth_element(cand.begin(), cand.begin() + (n - 1), cand.end(), by_logit);
            std::sort(cand.begin(), cand.begin() + n, by_logit);
            sorted = true;
        }
        float max_l = -INFINITY;
        for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, logits[cand[i]]);

        if (params.top_p < 1.0f) {
            double total = 0.0;
            for (size_t i = 0; i < n; ++i) total += std::exp((double) logits[cand[i]] - max_l);
            // Sort only as much of the head as the mass needs: usually a few dozen entries.
            size_t m = sorted ? n : std::min<size_t>(n, 64);
            for (;;) {
                if (!sorted) std::partial_sort(cand.begin(), cand.begin() + m, cand.begin() + n, by_logit);
                double cum = 0.0;
                size_t keep = 0;
                for (size_t i = 0; i < m; ++i) {
                    cum += std::exp((double) logits[cand[i]] - max_l) / total;
                    if (cum >= params.top_p) {
                        keep = i + 1;
                        break;
                    }
                }
                if (keep) {
                    n = keep;
                    break;
                }
                if (m == n) break;   // rounding: the whole set is kept
                m = std::min(n, m * 8);
            }
        }
        if (params.min_p > 0.0f) {
            const float min_l = max_l + std::log(params.min_p);
            size_t w = 0;
            for (size_t i = 0; i < n; ++i) {
                if (logits[cand[i]] >= min_l) cand[w++] = cand[i];
            }
            n = w;
        }
        cand.resize(n);
        cand_p.resize(n);
        const float inv_t = 1.0f / params.temperature;
        double sum = 0.0;
        for (size_t i = 0; i < n; ++i) {
            const double e = std::exp(((double) logits[cand[i]] - max_l) * inv_t);
            cand_p[i] = (float) e;
            sum += e;
        }
        for (float & p : cand_p) p = (float) (p / sum);
    }

    void write_dense(float * probs) const {
        std::memset(probs, 0, sizeof(float) * (size_t) n_vocab);
        for (size_t i = 0; i < cand.size(); ++i) probs[cand[i]] = cand_p[i];
    }

    // Draws from weights w over ids (ids == nullptr: the id is the index), by inverse CDF.
    int32_t draw(const float * w, const int32_t * ids, size_t n) {
        double total = 0.0;
        for (size_t i = 0; i < n; ++i) total += w[i];
        const double u = rng.uniform() * total;
        double cum = 0.0;
        size_t last = 0;
        for (size_t i = 0; i < n; ++i) {
            if (w[i] <= 0.0f) continue;
            cum += w[i];
            last = i;
            if (u < cum) break;
        }
        return ids ? ids[last] : (int32_t) last;
    }
};

using psl::fail;
using psl::guard;

extern "C" {

psl_sampling_params psl_sampling_default_params(void) {
    psl_sampling_params p;
    p.temperature = 0.8f;   // llama.cpp's defaults
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.seed = 0;
    return p;
}

psl_status psl_sampler_new(int32_t n_vocab, const psl_sampling_params * params, psl_sampler ** out) {
    return guard([&] {
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        const psl_sampling_params p = params ? *params : psl_sampling_default_params();
        if (n_vocab <= 0) fail(PSL_ERR_INVALID_ARGUMENT, "n_vocab must be > 0 (got %d)", n_vocab);
        if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
            fail(PSL_ERR_INVALID_ARGUMENT, "temperature must be >= 0 (got %g)", p.temperature);
        }
        if (p.top_k < 0) fail(PSL_ERR_INVALID_ARGUMENT, "top_k must be >= 0 (got %d)", p.top_k);
        if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail(PSL_ERR_INVALID_ARGUMENT, "top_p must be in (0, 1] (got %g)", p.top_p);
        if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) fail(PSL_ERR_INVALID_ARGUMENT, "min_p must be in [0, 1) (got %g)", p.min_p);
        auto * s = new psl_sampler();
        s->n_vocab = n_vocab;
        s->params = p;
        s->rng.seed(p.seed);
        *out = s;
    });
}

void psl_sampler_free(psl_sampler * s) { delete s; }

psl_status psl_sampler_set_seed(psl_sampler * s, uint64_t seed) {
    return guard([&] {
        if (!s) fail(PSL_ERR_INVALID_ARGUMENT, "sampler is NULL");
        s->rng.seed(seed);
    });
}

psl_status psl_sampler_probs(psl_sampler * s, const float * logits, float * probs) {
    return guard([&] {
        if (!s || !logits || !probs) fail(PSL_ERR_INVALID_ARGUMENT, "sampler, logits or probs is NULL");
        s->adjust(logits);
        s->write_dense(probs);
    });
}

psl_status psl_sampler_sample(psl_sampler * s, const float * logits, float * probs, int32_t * token, float * p_max) {
    return guard([&] {
        if (!s || !logits || !token) fail(PSL_ERR_INVALID_ARGUMENT, "sampler, logits or token is NULL");
        s->adjust(logits);
        if (probs) s->write_dense(probs);
        if (p_max) *p_max = *std::max_element(s->cand_p.begin(), s->cand_p.end());
        *token = s->cand.size() == 1 ? s->cand[0] : s->draw(s->cand_p.data(), s->cand.data(), s->cand.size());
    });
}

psl_status psl_sampler_verify(psl_sampler * s, const float * target_logits, const int32_t * draft,
                              const float * draft_probs, int32_t k, int32_t * n_accepted, int32_t * next_token) {
    return guard([&] {
        if (!s || !target_logits || !n_accepted || !next_token) {
            fail(PSL_ERR_INVALID_ARGUMENT, "sampler, target_logits, n_accepted or next_token is NULL");
        }
        if (k < 0 || (k > 0 && !draft)) fail(PSL_ERR_INVALID_ARGUMENT, "bad draft (k = %d)", k);
        const int32_t V = s->n_vocab;
        for (int32_t i = 0; i < k; ++i) {
            if (draft[i] < 0 || draft[i] >= V) fail(PSL_ERR_OUT_OF_RANGE, "draft token %d out of range", draft[i]);
        }
        for (int32_t i = 0; i < k; ++i) {
            const float * row = target_logits + (size_t) i * V;
            const int32_t x = draft[i];
            if (s->greedy()) {
                const int32_t best = argmax(row, V);
                if (best != x) {
                    *n_accepted = i;
                    *next_token = best;
                    return;
                }
                continue;
            }
            // q: the draft's distribution, or a point mass on x for a deterministic drafter
            const float * q = draft_probs ? draft_probs + (size_t) i * V : nullptr;
            const float qx = q ? q[x] : 1.0f;
            s->row_p.resize(V);
            s->adjust(row);
            s->write_dense(s->row_p.data());
            const float * p = s->row_p.data();
            // accept with probability min(1, p(x)/q(x))
            if (qx > 0.0f && s->rng.uniform() * qx < p[x]) continue;
            // rejected: draw from the residual norm(max(0, p - q))
            float * r = s->row_p.data();
            double mass = 0.0;
            for (int32_t j = 0; j < V; ++j) {
                r[j] = std::max(0.0f, p[j] - (q ? q[j] : (j == x ? 1.0f : 0.0f)));
                mass += r[j];
            }
            *n_accepted = i;
            if (mass > 0.0) {
                *next_token = s->draw(r, nullptr, (size_t) V);
            } else {   // p == q up to rounding: the residual is empty, p itself is right
                s->adjust(row);
                *next_token = s->draw(s->cand_p.data(), s->cand.data(), s->cand.size());
            }
            return;
        }
        // every draft accepted: the bonus token from p_k
        const float * row = target_logits + (size_t) k * V;
        *n_accepted = k;
        if (s->greedy()) {
            *next_token = argmax(row, V);
        } else {
            s->adjust(row);
            *next_token = s->cand.size() == 1 ? s->cand[0] : s->draw(s->cand_p.data(), s->cand.data(), s->cand.size());
        }
    });
}

}  // extern "C"
