// Command line of the native loopback program.
#pragma once

#include <cstdint>
#include <string>

namespace mr {

struct Options {
    std::string backend = "auto";  // auto | hsa | cuda
    std::string cuda_export = "allocation";
    std::string mode = "both";  // both | bug | fix
    std::string device;
    int port = 1;
    int gid_index = 1;
    int gpu = 0;
    uint64_t alloc_size = 64ULL << 20;
    uint64_t sub_offset = 32ULL << 20;
    uint64_t sub_size = 1ULL << 20;
    int timeout_ms = 10000;
    bool json = false;
    bool help = false;
};

// Returns an empty string on success, else what is wrong with the arguments.
std::string parse_options(int argc, char** argv, Options* out);
const char* usage();

}  // namespace mr
