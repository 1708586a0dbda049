// Prints llama.cpp's GBNF for a JSON list of JSON schemas (common/json-schema-to-grammar.cpp's
// json_schema_to_grammar, force_gbnf), as reference data for pyllamaspec's converter
// (tests/data/reference/json_schema_llamacpp.json, made by scripts/json_schema_reference.py).
// Not part of the build or CI.
//
// Build (LCPP = llama.cpp sources, B = its build dir):
//   g++ -O1 -std=c++17 scripts/llamacpp_json_schema.cpp -I $LCPP/include -I $LCPP/ggml/include \
//       -I $LCPP/common -I $LCPP/vendor -o /tmp/llamacpp_json_schema \
//       $B/common/libllama-common.a $B/vendor/cpp-httplib/libcpp-httplib.a \
//       $B/common/libllama-common-base.a $B/src/libllama.a $B/ggml/src/libggml.a \
//       $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
// Run:
//   /tmp/llamacpp_json_schema < schemas.json > out.json
// Output: one {"grammar": "..."} or {"error": "..."} per schema ({"grammar_hex": "..."} where the
// grammar is not valid UTF-8: llama.cpp splits a multi-byte character before a quantifier).
#include "json-schema-to-grammar.h"
#include "json.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>
#include <string>

int main() {
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto schemas = nlohmann::ordered_json::parse(input);
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto & s : schemas) {
        try {
            const std::string g = json_schema_to_grammar(common_json::parse(s.dump()), true);
            try {
                nlohmann::ordered_json(g).dump();
                out.push_back({{"grammar", g}});
            } catch (const nlohmann::json::exception &) {
                static const char * hex = "0123456789abcdef";
                std::string h;
                for (unsigned char c : g) {
                    h += hex[c >> 4];
                    h += hex[c & 15];
                }
                out.push_back({{"grammar_hex", h}});
            }
        } catch (const std::exception & e) {
            out.push_back({{"error", e.what()}});
        }
    }
    std::cout << out.dump() << "\n";
    return 0;
}
