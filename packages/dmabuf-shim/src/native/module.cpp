// dmabuf_shim._native: where the preload library is, its version, and the live counters of the
// copy preloaded into this process (if any).
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#ifndef DMABUF_SHIM_VERSION
#define DMABUF_SHIM_VERSION "0.0.0"
#endif

namespace py = pybind11;

namespace {

const char* const kCounterNames[] = {"registrations", "dmabuf", "passthrough", "fallback", "failures"};

std::string module_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&module_dir), &info) == 0 || info.dli_fname == nullptr)
        throw std::runtime_error("dladdr could not locate the dmabuf_shim._native module");
    std::string path(info.dli_fname);
    return path.substr(0, path.rfind('/'));
}

std::string library_path() { return module_dir() + "/libdmabuf_shim.so"; }

// The shim's exports as bound in this process: present only when it was preloaded (or loaded globally).
template <typename T>
T loaded(const char* name) {
    return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}

py::dict counters() {
    using fn = int (*)(uint64_t*, int);
    auto read = loaded<fn>("dmabuf_shim_counters");
    py::dict out;
    uint64_t values[5] = {0, 0, 0, 0, 0};
    if (read != nullptr) read(values, 5);
    for (int i = 0; i < 5; i++) out[kCounterNames[i]] = values[i];
    out["loaded"] = read != nullptr;
    return out;
}

py::object probe() {
    using fn = int (*)(char*, size_t);
    auto run = loaded<fn>("dmabuf_shim_probe");
    if (run == nullptr) return py::none();
    char buf[512];
    run(buf, sizeof(buf));
    return py::str(std::string(buf));
}

// ns per call of ibv_reg_mr through whatever is bound globally vs the function in `direct_lib`.
py::dict bench(const std::string& direct_lib, int64_t iterations, int rounds) {
    using reg = void* (*)(void*, void*, size_t, int);
    void* lib = dlopen(direct_lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) throw std::runtime_error("bench library not loaded: " + direct_lib);
    auto direct = reinterpret_cast<reg>(dlsym(lib, "ibv_reg_mr"));
    auto bound = reinterpret_cast<reg>(dlsym(RTLD_DEFAULT, "ibv_reg_mr"));
    if (direct == nullptr || bound == nullptr) throw std::runtime_error("ibv_reg_mr not found for the bench");
    if (iterations < 1 || rounds < 1) throw std::invalid_argument("iterations and rounds must be positive");
    static char buffer[4096];
    auto time_ns = [&](reg f) {
        double best = 1e300;
        for (int r = 0; r < rounds; r++) {
            auto t0 = std::chrono::steady_clock::now();
            for (int64_t i = 0; i < iterations; i++) {
                void* mr = f(nullptr, buffer, sizeof(buffer), 7);
                asm volatile("" : : "r"(mr) : "memory");  // keep every call
            }
            auto t1 = std::chrono::steady_clock::now();
            double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iterations);
            if (ns < best) best = ns;
        }
        return best;
    };
    time_ns(bound);  // warm up: resolves the shim's backends outside the timed rounds
    py::dict out;
    out["direct_ns"] = time_ns(direct);
    out["shim_ns"] = time_ns(bound);
    out["shim_is_bound"] = bound != direct;
    return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "Location, version and live counters of the dmabuf-shim preload library";
    m.def("library_path", &library_path, "Absolute path of libdmabuf_shim.so installed with this package");
    m.def("version", []() { return std::string(DMABUF_SHIM_VERSION); }, "Version the library was built as");
    m.def("counters", &counters, "Counters of the shim preloaded into this process; loaded=False when it is not");
    m.def("probe", &probe, "The preloaded shim's view of its environment, or None when it is not loaded");
    m.def("bench", &bench, py::arg("direct_lib"), py::arg("iterations"), py::arg("rounds"),
          "Time ibv_reg_mr through the bound symbol against direct_lib's, in ns per call");
}
