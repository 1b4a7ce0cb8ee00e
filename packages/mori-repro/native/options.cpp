#include "options.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace mr {

namespace {

// Accepts plain bytes or K/M/G with optional "iB"/"B" (binary multiples either way).
bool parse_size(const std::string& text, uint64_t* out) {
    if (text.empty() || text[0] == '-') return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str()) return false;
    std::string unit(end);
    uint64_t mult = 1;
    if (unit.empty() || unit == "B") mult = 1;
    else if (unit == "K" || unit == "KiB" || unit == "KB") mult = 1ULL << 10;
    else if (unit == "M" || unit == "MiB" || unit == "MB") mult = 1ULL << 20;
    else if (unit == "G" || unit == "GiB" || unit == "GB") mult = 1ULL << 30;
    else return false;
    if (value > UINT64_MAX / mult) return false;
    *out = value * mult;
    return true;
}

bool parse_int(const std::string& text, int lo, int hi, int* out) {
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0' || value < lo || value > hi) return false;
    *out = static_cast<int>(value);
    return true;
}

}  // namespace

const char* usage() {
    return "usage: mori-repro-loopback [--json] [--backend auto|hsa|cuda] [--gpu N]\n"
           "                           [--device NAME] [--port N] [--gid-index N]\n"
           "                           [--alloc-size SIZE] [--sub-offset SIZE] [--sub-size SIZE]\n"
           "                           [--mode both|bug|fix] [--cuda-export allocation|range] [--timeout-ms N]\n"
           "exit: 0 fixed behaviour confirmed, 10 bug reproduced, 11 fix not confirmed,\n"
           "      20 environment cannot run this, 2 usage error, 1 internal error\n";
}

std::string parse_options(int argc, char** argv, Options* o) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        size_t eq = arg.find('=');
        bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
        if (inline_value) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        }
        if (arg == "--json") { o->json = true; continue; }
        if (arg == "--help" || arg == "-h") { o->help = true; continue; }
        static const char* const kValued[] = {"--backend", "--mode", "--cuda-export", "--device", "--port",
                                              "--gid-index", "--gpu", "--timeout-ms", "--alloc-size",
                                              "--sub-offset", "--sub-size"};
        bool known = false;
        for (const char* k : kValued) known = known || arg == k;
        if (!known) return "unknown argument '" + arg + "'";
        if (!inline_value) {
            if (i + 1 >= argc) return arg + " needs a value";
            value = argv[++i];
        }
        auto one_of = [&](std::initializer_list<const char*> allowed, std::string* slot) {
            for (const char* a : allowed) {
                if (value == a) {
                    *slot = value;
                    return std::string();
                }
            }
            return arg + ": '" + value + "' is not one of the allowed values";
        };
        std::string bad;
        if (arg == "--backend") bad = one_of({"auto", "hsa", "cuda"}, &o->backend);
        else if (arg == "--mode") bad = one_of({"both", "bug", "fix"}, &o->mode);
        else if (arg == "--cuda-export") bad = one_of({"allocation", "range"}, &o->cuda_export);
        else if (arg == "--device") o->device = value;
        else if (arg == "--port") { if (!parse_int(value, 1, 255, &o->port)) bad = arg + ": expected 1..255, got '" + value + "'"; }
        else if (arg == "--gid-index") { if (!parse_int(value, 0, 65535, &o->gid_index)) bad = arg + ": expected 0..65535, got '" + value + "'"; }
        else if (arg == "--gpu") { if (!parse_int(value, 0, 1023, &o->gpu)) bad = arg + ": expected 0..1023, got '" + value + "'"; }
        else if (arg == "--timeout-ms") { if (!parse_int(value, 1, 3600000, &o->timeout_ms)) bad = arg + ": expected 1..3600000, got '" + value + "'"; }
        else if (arg == "--alloc-size") { if (!parse_size(value, &o->alloc_size)) bad = arg + ": not a size: '" + value + "'"; }
        else if (arg == "--sub-offset") { if (!parse_size(value, &o->sub_offset)) bad = arg + ": not a size: '" + value + "'"; }
        else if (arg == "--sub-size") { if (!parse_size(value, &o->sub_size)) bad = arg + ": not a size: '" + value + "'"; }
        else return "unknown argument '" + arg + "'";
        if (!bad.empty()) return bad;
    }
    // The sentinel occupies the first sub-size bytes, so the sub-allocation must not overlap it.
    if (o->sub_size == 0) return "--sub-size must be positive";
    if (o->sub_size > (1ULL << 31)) return "--sub-size must be at most 2 GiB (one RDMA message)";
    if (o->sub_offset < o->sub_size)
        return "--sub-offset must be at least --sub-size, so the sub-allocation does not overlap the sentinel at the base";
    if (o->sub_offset + o->sub_size > o->alloc_size)
        return "the sub-allocation (--sub-offset + --sub-size) must lie inside --alloc-size";
    return "";
}

}  // namespace mr
