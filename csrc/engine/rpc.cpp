// ggml's RPC backend: a model's layers split over RPC servers' devices and the local ones
// (client), and serving this machine's devices to such clients (server, llama.cpp's rpc-server).
//
// ggml-rpc's client aborts the process on any socket error (RPC_STATUS_ASSERT/GGML_ABORT, on its
// dispatcher thread). The core cannot catch that, so the Python layer loads a model with
// rpc_servers in a worker process of its own (pyllamaspec/rpc.py) and probes each server first.
#include "error.h"
#include "model.h"

#include "ggml-backend.h"
#ifdef GGML_USE_RPC
#include "ggml-rpc.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace psl {

namespace {

std::vector<std::string> split_list(const char * s) {
    std::vector<std::string> out;
    std::string cur;
    for (const char * p = s; ; ++p) {
        if (*p == ',' || *p == '\0') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
            if (*p == '\0') break;
        } else if (*p != ' ') {
            cur += *p;
        }
    }
    return out;
}

// host:port with a port in 1..65535 (ggml-rpc aborts on an endpoint it cannot parse).
void check_endpoint(const std::string & ep) {
    const size_t colon = ep.rfind(':');
    const std::string port = colon == std::string::npos ? "" : ep.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (colon == 0 || !digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
        fail(PSL_ERR_INVALID_ARGUMENT, "RPC server '%s' is not host:port", ep.c_str());
    }
}

// Each server's devices, then a local accelerator if there is one, then the CPU.
std::vector<ggml_backend_dev_t> split_devices(const psl_model & m, const char * servers) {
    std::vector<ggml_backend_dev_t> devs;
#ifdef GGML_USE_RPC
    const std::vector<std::string> eps = split_list(servers);
    if (eps.empty()) fail(PSL_ERR_INVALID_ARGUMENT, "rpc_servers '%s' names no server", servers);
    if (eps.size() > GGML_RPC_MAX_SERVERS) fail(PSL_ERR_INVALID_ARGUMENT, "at most %d RPC servers", GGML_RPC_MAX_SERVERS);
    for (const std::string & ep : eps) {
        check_endpoint(ep);
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(ep.c_str());
        if (!reg || ggml_backend_reg_dev_count(reg) == 0) fail(PSL_ERR_BACKEND, "RPC server %s has no devices", ep.c_str());
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) devs.push_back(ggml_backend_reg_dev_get(reg, i));
    }
#else
    (void) servers;
    fail(PSL_ERR_UNSUPPORTED, "this build has no RPC backend (configure with -DGGML_RPC=ON)");
#endif
    ggml_backend_dev_t gpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU);
    if (!gpu) gpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU);
    if (gpu) devs.push_back(gpu);
    devs.push_back(m.dev_cpu);
    return devs;
}

// The share of each device: the caller's, else its free memory (llama.cpp's default).
std::vector<double> shares(const std::vector<ggml_backend_dev_t> & devs, const psl_model_params & p) {
    std::vector<double> w(devs.size(), 0.0);
    if (p.tensor_split && p.n_tensor_split > 0) {
        if ((size_t) p.n_tensor_split != devs.size()) {
            fail(PSL_ERR_INVALID_ARGUMENT, "tensor_split has %d values for %zu devices (RPC servers' devices, "
                 "then the local ones)", p.n_tensor_split, devs.size());
        }
        for (size_t i = 0; i < devs.size(); ++i) {
            const float v = p.tensor_split[i];
            if (!std::isfinite(v) || v < 0) fail(PSL_ERR_INVALID_ARGUMENT, "tensor_split values must be >= 0 (got %g)", v);
            w[i] = v;
        }
    } else {
        for (size_t i = 0; i < devs.size(); ++i) {
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(devs[i], &free, &total);
            w[i] = (double) free;
        }
    }
    double sum = 0;
    for (double v : w) sum += v;
    if (!(sum > 0)) fail(PSL_ERR_INVALID_ARGUMENT, "tensor_split gives no device a share of the layers");
    return w;
}

}  // namespace

void split_layers(psl_model & m, const psl_model_params & params) {
    // a split replaces the -ngl offload: every device, the local GPU included, takes a share
    m.dev_gpu = nullptr;
    m.n_gpu_layers = 0;
    m.output_on_gpu = false;
    m.split_devs = split_devices(m, params.rpc_servers);
    const std::vector<double> w = shares(m.split_devs, params);
    // cumulative fractions; layer il goes to the first device whose bound passes il / n_layer
    std::vector<double> bound(w.size());
    double acc = 0, sum = 0;
    for (double v : w) sum += v;
    for (size_t i = 0; i < w.size(); ++i) bound[i] = (acc += w[i]) / sum;
    const int32_t n_layer = m.hp.n_layer;
    m.layer_split.assign(n_layer, 0);
    for (int32_t il = 0; il < n_layer; ++il) {
        const double at = (double) il / n_layer;
        size_t d = (size_t) (std::upper_bound(bound.begin(), bound.end(), at) - bound.begin());
        m.layer_split[il] = (int32_t) std::min(d, w.size() - 1);
        if (m.split_devs[m.layer_split[il]] != m.dev_cpu) ++m.n_gpu_layers;
    }
}

}  // namespace psl

using namespace psl;

const char * psl_model_layer_device(const psl_model * m, int32_t il) {
    if (!m || !m->dev_cpu || il < -1 || il >= m->hp.n_layer) return nullptr;
    return ggml_backend_dev_name(il < 0 ? m->output_device() : m->layer_device(il));
}

psl_status psl_model_load_stub(const char * path, int32_t n_vocab, psl_model ** out) {
    if (!out) return psl_vocab_load(path, out);   // the same errors as a vocabulary load
    const psl_status st = psl_vocab_load(path, out);
    if (st != PSL_OK) return st;
    return guard([&] {
        const int32_t n_tokens = (*out)->hp.n_vocab;
        if (n_vocab < n_tokens) {
            psl_model_free(*out);
            *out = nullptr;
            fail(PSL_ERR_INVALID_ARGUMENT, "n_vocab %d is below the tokenizer's %d tokens", n_vocab, n_tokens);
        }
        (*out)->hp.n_vocab = n_vocab;
        (*out)->stub = true;
    });
}

bool psl_rpc_available(void) {
#ifdef GGML_USE_RPC
    return true;
#else
    return false;
#endif
}

void psl_rpc_version(int32_t * major, int32_t * minor, int32_t * patch) {
#ifdef GGML_USE_RPC
    if (major) *major = RPC_PROTO_MAJOR_VERSION;
    if (minor) *minor = RPC_PROTO_MINOR_VERSION;
    if (patch) *patch = RPC_PROTO_PATCH_VERSION;
#else
    if (major) *major = 0;
    if (minor) *minor = 0;
    if (patch) *patch = 0;
#endif
}

// As llama.cpp's rpc-server picks devices: the named ones, else every accelerator, else the CPU.
psl_status psl_rpc_serve(const char * endpoint, const char * cache_dir, int32_t n_threads, const char * devices) {
    return guard([&] {
        if (!endpoint) fail(PSL_ERR_INVALID_ARGUMENT, "endpoint is NULL");
        check_endpoint(endpoint);
        if (n_threads < 0 || n_threads > max_threads()) {
            fail(PSL_ERR_INVALID_ARGUMENT, "n_threads must be in [0, %d] (got %d)", max_threads(), n_threads);
        }
#ifdef GGML_USE_RPC
        std::vector<ggml_backend_dev_t> devs;
        for (const std::string & name : split_list(devices ? devices : "")) {
            ggml_backend_dev_t d = ggml_backend_dev_by_name(name.c_str());
            if (!d) {
                std::string known;
                for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
                    known += std::string(known.empty() ? "" : ", ") + ggml_backend_dev_name(ggml_backend_dev_get(i));
                }
                fail(PSL_ERR_INVALID_ARGUMENT, "unknown device '%s' (available: %s)", name.c_str(), known.c_str());
            }
            devs.push_back(d);
        }
        for (size_t i = 0; devs.empty() && i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            const auto t = ggml_backend_dev_type(d);
            if (t != GGML_BACKEND_DEVICE_TYPE_CPU && t != GGML_BACKEND_DEVICE_TYPE_ACCEL) devs.push_back(d);
        }
        if (devs.empty()) devs.push_back(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
        if (!devs.back()) fail(PSL_ERR_BACKEND, "no device to serve");
        const size_t threads = n_threads > 0 ? (size_t) n_threads : std::max(1u, std::thread::hardware_concurrency() / 2);
        ggml_backend_rpc_start_server(endpoint, cache_dir && *cache_dir ? cache_dir : nullptr, threads, devs.size(),
                                      devs.data());
        // it returns only when it could not start (it printed why) or accept failed
        fail(PSL_ERR_BACKEND, "the RPC server at %s stopped (is the port in use? see the message above)", endpoint);
#else
        (void) cache_dir;
        (void) devices;
        fail(PSL_ERR_UNSUPPORTED, "this build has no RPC backend (configure with -DGGML_RPC=ON)");
#endif
    });
}
