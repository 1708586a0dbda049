// Prints llama.cpp's chat-template rendering and prompt token ids for a JSON list of
// conversations, as reference data for pyllamaspec's chat templates. Not part of the build or CI.
//
// Renders with common_chat_templates_init / common_chat_templates_apply (use_jinja = true, the
// model's own template), then tokenizes the prompt as llama-cli and llama-server do
// (add_special = true, parse_special = true: BOS added by the tokenizer when the vocabulary asks
// for it; llama.cpp drops a BOS the template wrote itself, so it is not doubled).
//
// Build (against a llama.cpp build tree; LCPP = sources, B = ninja build dir):
//   g++ -O1 -std=c++17 scripts/llamacpp_chat.cpp -I $LCPP/include -I $LCPP/ggml/include \
//       -I $LCPP/common -I $LCPP/vendor -o /tmp/llamacpp_chat \
//       $B/common/libllama-common.a $B/vendor/cpp-httplib/libcpp-httplib.a \
//       $B/common/libllama-common-base.a $B/src/libllama.a $B/ggml/src/libggml.a \
//       $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
// Run:
//   /tmp/llamacpp_chat MODEL.gguf [TEMPLATE_FILE] < conversations.json > out.json
// (TEMPLATE_FILE: a Jinja template in place of the model's, as llama.cpp's --chat-template-file)
// Input: [{"messages": [{"role": ..., "content": ...}, ...], "add_generation_prompt": bool}, ...]
// Output: the same list, each with "prompt" (llama.cpp's rendered text) and "ids" added.
#include "chat.h"
#include "common.h"
#include "llama.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

using json = nlohmann::ordered_json;

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [TEMPLATE_FILE] < conversations.json\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    json convs = json::parse(input);
    std::string override_src;
    if (argc > 2) {
        std::ifstream f(argv[2]);
        override_src.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        if (override_src.empty()) return 1;
    }
    auto tmpls = common_chat_templates_init(model, override_src);

    for (auto & conv : convs) {
        common_chat_templates_inputs in;
        in.use_jinja = true;
        in.add_generation_prompt = conv.value("add_generation_prompt", true);
        for (const auto & m : conv.at("messages")) {
            common_chat_msg msg;
            msg.role = m.at("role").get<std::string>();
            msg.content = m.at("content").get<std::string>();
            if (m.contains("reasoning_content")) msg.reasoning_content = m.at("reasoning_content").get<std::string>();
            in.messages.push_back(msg);
        }
        common_chat_params out = common_chat_templates_apply(tmpls.get(), in);
        std::vector<llama_token> ids = common_tokenize(vocab, out.prompt, true, true);
        conv["prompt"] = out.prompt;
        conv["ids"] = ids;
    }
    std::cout << convs.dump(1) << "\n";
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
