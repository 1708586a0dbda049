// The architectures a model file may name (general.architecture): adding one is a file in this
// folder and its line here.
#include "model.h"

#include <string>

namespace psl {

extern const ArchOps arch_llama;
extern const ArchOps arch_qwen2;
extern const ArchOps arch_qwen2vl;
extern const ArchOps arch_qwen3;
extern const ArchOps arch_gemma3;
extern const ArchOps arch_qwen2moe;
extern const ArchOps arch_qwen3moe;
extern const ArchOps arch_gptoss;
extern const ArchOps arch_qwen35;
extern const ArchOps arch_gemma4;
extern const ArchOps arch_qwen35moe;
extern const ArchOps arch_deepseek2;
extern const ArchOps arch_glm4moe;
extern const ArchOps arch_mistral3;
extern const ArchOps arch_eagle3;
extern const ArchOps arch_dflash;
extern const ArchOps arch_gemma4_assistant;
extern const ArchOps arch_qwen3vl;
extern const ArchOps arch_qwen3vlmoe;

namespace {
const ArchOps * const k_archs[] = {&arch_llama, &arch_qwen2, &arch_qwen3, &arch_gemma3,
                                   &arch_qwen2moe, &arch_qwen3moe, &arch_gptoss, &arch_qwen35,
                                   &arch_gemma4, &arch_qwen35moe, &arch_deepseek2, &arch_glm4moe,
                                   &arch_mistral3, &arch_eagle3, &arch_dflash,
                                   &arch_gemma4_assistant, &arch_qwen3vl, &arch_qwen3vlmoe, &arch_qwen2vl};
}

const ArchOps * find_arch(const std::string & name) {
    for (const ArchOps * a : k_archs) {
        if (name == a->name) return a;
    }
    return nullptr;
}

std::string supported_archs() {
    std::string s;
    for (const ArchOps * a : k_archs) {
        if (!s.empty()) s += ", ";
        s += a->name;
    }
    return s;
}

}  // namespace psl
