// Prints llama.cpp's handling of tool calling for one chat template, as reference data for
// pyllamaspec's tools (tests/data/reference/chat_tools_llamacpp.json, made by
// scripts/chat_tools_reference.py). Not part of the build or CI.
//
// For each request (OpenAI messages, tools, tool_choice, parallel_tool_calls) it runs what
// llama-server runs: common_chat_msgs_parse_oaicompat / common_chat_tools_parse_oaicompat, then
// common_chat_templates_apply (jinja, reasoning_format "deepseek" and enable_thinking as the
// server's defaults, or the request's "reasoning_format" and "enable_thinking"), and records the
// prompt, the grammar (lazy or not, its triggers), the generation prompt, the format, the extra
// stops and the thinking tags (what --reasoning-budget counts between); then it parses each given
// model output with the request's parser (common_chat_parse, not partial, tool calls parsed) into
// the assistant message llama-server would answer (its OpenAI JSON), or the parser's error; and,
// for "partial_outputs", the partial parse a stream makes of that text so far.
//
// Build (LCPP = llama.cpp sources, B = its build dir):
//   g++ -O1 -std=c++17 scripts/llamacpp_chat_tools.cpp -I $LCPP/include -I $LCPP/ggml/include \
//       -I $LCPP/common -I $LCPP/vendor -o /tmp/llamacpp_chat_tools \
//       $B/common/libllama-common.a $B/vendor/cpp-httplib/libcpp-httplib.a \
//       $B/common/libllama-common-base.a $B/src/libllama.a $B/ggml/src/libggml.a \
//       $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
// Run:
//   /tmp/llamacpp_chat_tools VOCAB_MODEL.gguf TEMPLATE_FILE < requests.json > out.json
// Input: [{"messages": [...], "tools": [...], "tool_choice": "auto", "parallel_tool_calls": false,
//          "outputs": ["model text", ...]}, ...]
#include "chat.h"
#include "common.h"
#include "json.h"
#include "llama.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

using ojson = nlohmann::ordered_json;

static void quiet(ggml_log_level, const char *, void *) {}

static ojson to_ojson(const common_json & j) { return ojson::parse(j.dump()); }

static ojson run_request(const common_chat_templates * tmpls, const ojson & req) {
    common_chat_templates_inputs in;
    in.messages = common_chat_msgs_parse_oaicompat(common_json::parse(req.at("messages").dump()));
    if (req.contains("tools")) in.tools = common_chat_tools_parse_oaicompat(common_json::parse(req.at("tools").dump()));
    in.tool_choice = common_chat_tool_choice_parse_oaicompat(req.value("tool_choice", std::string("auto")));
    in.parallel_tool_calls = req.value("parallel_tool_calls", false);
    const common_reasoning_format rf = common_reasoning_format_from_name(req.value("reasoning_format", std::string("deepseek")));
    in.reasoning_format = rf;
    in.enable_thinking = req.value("enable_thinking", true);
    in.add_generation_prompt = req.value("add_generation_prompt", true);
    const common_chat_params p = common_chat_templates_apply(tmpls, in);
    ojson triggers = ojson::array();
    for (const auto & t : p.grammar_triggers) triggers.push_back({{"type", (int) t.type}, {"value", t.value}});
    ojson out = {{"prompt", p.prompt}, {"format", common_chat_format_name(p.format)}, {"grammar", p.grammar},
                 {"grammar_lazy", p.grammar_lazy}, {"grammar_triggers", triggers},
                 {"generation_prompt", p.generation_prompt}, {"additional_stops", p.additional_stops},
                 {"preserved_tokens", p.preserved_tokens}, {"supports_thinking", p.supports_thinking},
                 {"thinking_start_tag", p.thinking_start_tag}, {"thinking_end_tags", p.thinking_end_tags},
                 {"parsed", ojson::array()}, {"partial", ojson::array()}};
    common_chat_parser_params pp(p);
    pp.reasoning_format = rf;
    pp.parse_tool_calls = !in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE;
    if (!p.parser.empty()) pp.parser.load(p.parser);
    // whole answers ("parsed"), and the partial parses a stream makes ("partial")
    for (const bool partial : {false, true}) {
        for (const auto & text : req.value(partial ? "partial_outputs" : "outputs", ojson::array())) {
            ojson & into = out[partial ? "partial" : "parsed"];
            try {
                const common_chat_msg msg = common_chat_parse(text.get<std::string>(), partial, pp);
                into.push_back({{"message", to_ojson(msg.to_json_oaicompat(true))}});
            } catch (const std::exception & e) {
                into.push_back({{"error", e.what()}});
            }
        }
    }
    return out;
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s VOCAB_MODEL.gguf TEMPLATE_FILE < requests.json\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    std::ifstream f(argv[2]);
    std::string src((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto tmpls = common_chat_templates_init(model, src);
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    ojson out = ojson::array();
    for (const auto & req : ojson::parse(input)) {
        try {
            out.push_back(run_request(tmpls.get(), req));
        } catch (const std::exception & e) {
            out.push_back({{"error", e.what()}});
        }
    }
    std::cout << out.dump() << "\n";
    llama_model_free(model);
    return 0;
}
