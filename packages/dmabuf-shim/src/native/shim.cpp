// libdmabuf_shim.so: an LD_PRELOAD library that turns plain verbs registrations of GPU memory
// into dma-buf registrations at the exporter's offset (the ROCm/mori#509 bug class), and leaves
// host memory to the real libibverbs untouched.
//
// Interposed: ibv_reg_mr (IBVERBS_1.1), ibv_reg_mr_iova (1.7), ibv_reg_mr_iova2 (1.8). rdma-core's
// header turns ibv_reg_mr(...) into a call of ibv_reg_mr or, for non-constant access flags (UCX),
// ibv_reg_mr_iova2; unversioned definitions here satisfy the versioned references of callers.
// libibverbs, the HSA runtime and the CUDA driver are found with dlsym/dlopen at the first
// registration; nothing here links against them.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "abi.h"

#ifndef DMABUF_SHIM_VERSION
#define DMABUF_SHIM_VERSION "0.0.0"
#endif

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum Counter { kRegistrations, kDmabuf, kPassthrough, kFallback, kFailures, kNumCounters };

struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};
};
Slot g_counters[kNumCounters];

inline void bump(Counter c) { g_counters[c].value.fetch_add(1, std::memory_order_relaxed); }

enum class Kind { kRegMr, kIova, kIova2 };
enum class Backend { kNone, kHsa, kCuda };

struct Real {
    reg_mr_fn reg_mr = nullptr;
    reg_mr_iova_fn reg_mr_iova = nullptr;
    reg_mr_iova2_fn reg_mr_iova2 = nullptr;
    reg_dmabuf_mr_fn reg_dmabuf_mr = nullptr;
} g_real;

struct Hsa {
    hsa_pointer_info_fn pointer_info = nullptr;
    hsa_agent_get_info_fn agent_get_info = nullptr;
    hsa_export_fn export_v1 = nullptr;
    hsa_export_v2_fn export_v2 = nullptr;
    hsa_close_fn close = nullptr;
} g_hsa;

struct Cuda {
    cu_pointer_get_attribute_fn pointer_attribute = nullptr;
    cu_get_handle_fn get_handle = nullptr;
} g_cuda;

// Written once by init_once() before g_ready is released; read-only afterwards.
bool g_use_hsa = false;
bool g_use_cuda = false;
int g_log_level = 1;  // 0 off, 1 GPU registrations, 2 every registration
int g_log_fd = 2;
unsigned int g_strip = 0;
bool g_classify_always = false;  // false: ask the runtime only after the plain call failed
uint64_t g_page = 4096;
std::atomic<bool> g_ready{false};
pthread_once_t g_once = PTHREAD_ONCE_INIT;

// Depth of shim code on this thread: a registration made from inside the shim (an exporter or a
// runtime's constructor calling back into verbs) goes straight to libibverbs.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;

struct DepthGuard {
    DepthGuard() { ++t_depth; }
    ~DepthGuard() { --t_depth; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
};

void emit(const char* line, int n) {
    if (n <= 0) return;
    if (n > 1023) n = 1023;
    ssize_t ignored = write(g_log_fd, line, static_cast<size_t>(n));
    (void)ignored;
}

template <typename... Args>
void shim_logf(const char* fmt, Args... args) {
    char line[1024];
    int n = snprintf(line, sizeof(line), fmt, args...);
    emit(line, n);
}

template <typename T>
T symbol(void* handle, const char* name) {
    return reinterpret_cast<T>(dlsym(handle, name));
}

void resolve_real() {
    // RTLD_NEXT finds the libibverbs linked into the program; a libibverbs dlopen()ed with
    // RTLD_LOCAL (a UCX module's dependency) is only reachable through its own handle.
    void* next = RTLD_NEXT;
    g_real.reg_mr = symbol<reg_mr_fn>(next, "ibv_reg_mr");
    g_real.reg_mr_iova = symbol<reg_mr_iova_fn>(next, "ibv_reg_mr_iova");
    g_real.reg_mr_iova2 = symbol<reg_mr_iova2_fn>(next, "ibv_reg_mr_iova2");
    g_real.reg_dmabuf_mr = symbol<reg_dmabuf_mr_fn>(next, "ibv_reg_dmabuf_mr");
    if (g_real.reg_mr == nullptr) {
        void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib != nullptr) {
            g_real.reg_mr = symbol<reg_mr_fn>(lib, "ibv_reg_mr");
            g_real.reg_mr_iova = symbol<reg_mr_iova_fn>(lib, "ibv_reg_mr_iova");
            g_real.reg_mr_iova2 = symbol<reg_mr_iova2_fn>(lib, "ibv_reg_mr_iova2");
            g_real.reg_dmabuf_mr = symbol<reg_dmabuf_mr_fn>(lib, "ibv_reg_dmabuf_mr");
        }
    }
}

void* open_runtime(const char* env, const char* fallback) {
    const char* name = getenv(env);
    if (name == nullptr || *name == '\0') name = fallback;
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return lib != nullptr ? lib : dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

void load_hsa() {
    void* lib = open_runtime("DMABUF_SHIM_HSA_LIB", "libhsa-runtime64.so.1");
    if (lib == nullptr) return;
    g_hsa.pointer_info = symbol<hsa_pointer_info_fn>(lib, "hsa_amd_pointer_info");
    g_hsa.agent_get_info = symbol<hsa_agent_get_info_fn>(lib, "hsa_agent_get_info");
    g_hsa.export_v1 = symbol<hsa_export_fn>(lib, "hsa_amd_portable_export_dmabuf");
    g_hsa.export_v2 = symbol<hsa_export_v2_fn>(lib, "hsa_amd_portable_export_dmabuf_v2");
    g_hsa.close = symbol<hsa_close_fn>(lib, "hsa_amd_portable_close_dmabuf");
    g_use_hsa = g_hsa.pointer_info != nullptr && (g_hsa.export_v1 != nullptr || g_hsa.export_v2 != nullptr);
}

void load_cuda() {
    void* lib = open_runtime("DMABUF_SHIM_CUDA_LIB", "libcuda.so.1");
    if (lib == nullptr) return;
    g_cuda.pointer_attribute = symbol<cu_pointer_get_attribute_fn>(lib, "cuPointerGetAttribute");
    g_cuda.get_handle = symbol<cu_get_handle_fn>(lib, "cuMemGetHandleForAddressRange");
    g_use_cuda = g_cuda.pointer_attribute != nullptr && g_cuda.get_handle != nullptr;
}

void read_config(bool* want_hsa, bool* want_cuda) {
    const char* file = getenv("DMABUF_SHIM_LOG_FILE");
    if (file != nullptr && *file != '\0') {
        int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            g_log_fd = fd;
        else
            shim_logf("dmabuf-shim: config bad DMABUF_SHIM_LOG_FILE='%s' (%s); logging to stderr\n", file, strerror(errno));
    }
    const char* level = getenv("DMABUF_SHIM_LOG");
    if (level != nullptr && *level != '\0') {
        if (strcmp(level, "off") == 0)
            g_log_level = 0;
        else if (strcmp(level, "gpu") == 0)
            g_log_level = 1;
        else if (strcmp(level, "all") == 0)
            g_log_level = 2;
        else
            shim_logf("dmabuf-shim: config bad DMABUF_SHIM_LOG='%s' (want off, gpu or all); using gpu\n", level);
    }
    const char* strip = getenv("DMABUF_SHIM_STRIP_ACCESS");
    if (strip != nullptr && *strip != '\0') {
        char* end = nullptr;
        unsigned long mask = strtoul(strip, &end, 0);
        if (end != nullptr && *end == '\0' && mask <= 0xffffffffUL)
            g_strip = static_cast<unsigned int>(mask);
        else
            shim_logf("dmabuf-shim: config bad DMABUF_SHIM_STRIP_ACCESS='%s' (want a number such as 0x8); ignored\n",
                 strip);
    }
    const char* classify = getenv("DMABUF_SHIM_CLASSIFY");
    if (classify != nullptr && *classify != '\0') {
        if (strcmp(classify, "always") == 0)
            g_classify_always = true;
        else if (strcmp(classify, "on-failure") != 0)
            shim_logf("dmabuf-shim: config bad DMABUF_SHIM_CLASSIFY='%s' (want on-failure or always); using on-failure\n",
                      classify);
    }
    const char* backend = getenv("DMABUF_SHIM_BACKEND");
    if (backend == nullptr || *backend == '\0' || strcmp(backend, "auto") == 0) return;
    *want_hsa = strcmp(backend, "hsa") == 0;
    *want_cuda = strcmp(backend, "cuda") == 0;
    if (!*want_hsa && !*want_cuda && strcmp(backend, "none") != 0)
        shim_logf("dmabuf-shim: config bad DMABUF_SHIM_BACKEND='%s' (want auto, hsa, cuda or none); using none\n",
             backend);
}

void init_once() {
    DepthGuard guard;
    resolve_real();
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) g_page = static_cast<uint64_t>(page);
    bool want_hsa = true, want_cuda = true;
    read_config(&want_hsa, &want_cuda);
    if (want_hsa) load_hsa();
    if (want_cuda) load_cuda();
    if (g_log_level > 0) {
        const char* backends = g_use_hsa && g_use_cuda ? "hsa,cuda" : g_use_hsa ? "hsa" : g_use_cuda ? "cuda" : "none";
        shim_logf("dmabuf-shim: init version=%s backends=%s ibverbs=%d reg_dmabuf=%d strip=0x%x classify=%s\n",
                  DMABUF_SHIM_VERSION, backends, g_real.reg_mr != nullptr ? 1 : 0,
                  g_real.reg_dmabuf_mr != nullptr ? 1 : 0, g_strip, g_classify_always ? "always" : "on-failure");
    }
    g_ready.store(true, std::memory_order_release);
}

inline void ensure_init() {
    if (!g_ready.load(std::memory_order_acquire)) pthread_once(&g_once, init_once);
}

ibv_mr* call_real(Kind kind, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
    switch (kind) {
        case Kind::kRegMr:
            if (g_real.reg_mr != nullptr) return g_real.reg_mr(pd, addr, length, static_cast<int>(access));
            break;
        case Kind::kIova:
            if (g_real.reg_mr_iova != nullptr)
                return g_real.reg_mr_iova(pd, addr, length, iova, static_cast<int>(access));
            break;
        case Kind::kIova2:
            if (g_real.reg_mr_iova2 != nullptr) return g_real.reg_mr_iova2(pd, addr, length, iova, access);
            break;
    }
    errno = ENOSYS;  // no libibverbs behind us: nothing a caller could have reached either
    return nullptr;
}

const char* backend_name(Backend b) { return b == Backend::kHsa ? "hsa" : b == Backend::kCuda ? "cuda" : "none"; }

// One line per registration, format documented in README.md (the evidence parser reads it).
void log_registration(bool ok, Backend backend, bool dmabuf, size_t length, long long offset, bool fd_closed,
                      void* addr, uint64_t iova, unsigned int access, int err, const char* detail) {
    char line[512];
    int n = snprintf(line, sizeof(line),
                     "dmabuf-shim: reg %s backend=%s path=%s size=%zu offset=%lld fd_closed=%d addr=%p iova=0x%llx "
                     "access=0x%x",
                     ok ? "ok" : "fail", backend_name(backend), dmabuf ? "dmabuf" : "plain", length, offset,
                     fd_closed ? 1 : 0, addr, static_cast<unsigned long long>(iova), access);
    if (n < 0 || n >= static_cast<int>(sizeof(line))) return;
    if (!ok) n += snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " errno=%d", err);
    if (detail != nullptr && n < static_cast<int>(sizeof(line)))
        n += snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " detail=%s", detail);
    if (n >= static_cast<int>(sizeof(line)) - 1) n = static_cast<int>(sizeof(line)) - 2;
    line[n++] = '\n';
    emit(line, n);
}

bool is_hsa_device_memory(void* addr) {
    hsa_amd_pointer_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (g_hsa.pointer_info(addr, &info, nullptr, nullptr, nullptr) != HSA_STATUS_SUCCESS) return false;
    if (info.type != HSA_EXT_POINTER_TYPE_HSA) return false;
    // HSA also hands out system memory (fine-grained host pools); only a GPU-owned allocation needs dma-buf.
    if (info.size >= offsetof(hsa_amd_pointer_info_t, agentOwner) + sizeof(hsa_agent_t) &&
        g_hsa.agent_get_info != nullptr) {
        int device = -1;
        if (g_hsa.agent_get_info(info.agentOwner, HSA_AGENT_INFO_DEVICE, &device) == HSA_STATUS_SUCCESS &&
            device != HSA_DEVICE_TYPE_GPU)
            return false;
    }
    return true;
}

bool is_cuda_device_memory(void* addr) {
    unsigned int type = 0;
    CUresult rc = g_cuda.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(addr)));
    return rc == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
}

// Exports [addr, addr + length) and returns the fd and the offset of addr inside it, or the
// exporter's status in *status.
int export_range(Backend backend, void* addr, size_t length, uint64_t* offset, int* status) {
    int fd = -1;
    if (backend == Backend::kHsa) {
        // the fd covers the whole allocation; offset = addr - allocation start (any alignment)
        *status = g_hsa.export_v2 != nullptr ? g_hsa.export_v2(addr, length, &fd, offset, 0)
                                             : g_hsa.export_v1(addr, length, &fd, offset);
        return *status == HSA_STATUS_SUCCESS ? fd : -1;
    }
    // CUDA exports exactly the range asked for, which must be page-aligned at both ends
    uint64_t start = reinterpret_cast<uintptr_t>(addr);
    uint64_t aligned = start & ~(g_page - 1);
    uint64_t end = (start + length + g_page - 1) & ~(g_page - 1);
    *status = g_cuda.get_handle(&fd, aligned, end - aligned, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    *offset = start - aligned;
    return *status == CUDA_SUCCESS ? fd : -1;
}

bool close_export(Backend backend, int fd) {
    if (backend == Backend::kHsa && g_hsa.close != nullptr) return g_hsa.close(fd) == HSA_STATUS_SUCCESS;
    return close(fd) == 0;
}

// Registers GPU memory through dma-buf. Returns false when addr is not GPU memory.
// plain_errno: the errno of a plain call already made and failed, -1 when none was made.
bool register_gpu(Kind kind, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access,
                  int plain_errno, ibv_mr** out) {
    DepthGuard guard;
    Backend backend = Backend::kNone;
    if (g_use_hsa && is_hsa_device_memory(addr))
        backend = Backend::kHsa;
    else if (g_use_cuda && is_cuda_device_memory(addr))
        backend = Backend::kCuda;
    if (backend == Backend::kNone) return false;

    char detail[96] = "";
    size_t used_detail = 0;
    auto note = [&](const char* what, unsigned int value, bool hex) {
        char item[48];
        if (value == 0 && !hex)
            snprintf(item, sizeof(item), "%s", what);
        else
            snprintf(item, sizeof(item), hex ? "%s:0x%x" : "%s:%u", what, value);
        int n = snprintf(detail + used_detail, sizeof(detail) - used_detail, "%s%s", used_detail ? "," : "", item);
        if (n > 0) used_detail = std::min(sizeof(detail) - 1, used_detail + static_cast<size_t>(n));
    };
    if (plain_errno > 0) note("plain_errno", static_cast<unsigned int>(plain_errno), false);
    uint64_t offset = 0;
    int status = 0;
    int fd = -1;
    bool exported = false;
    if (g_real.reg_dmabuf_mr == nullptr) {
        note("no_ibv_reg_dmabuf_mr", 0, false);
    } else if ((fd = export_range(backend, addr, length, &offset, &status)) < 0) {
        note("export_status", static_cast<unsigned int>(status), true);
    } else {
        exported = true;
    }
    if (!exported) {
        // Without a dma-buf the plain call is all a caller could get (it works on NICs with peer memory).
        bump(kFallback);
        ibv_mr* mr = nullptr;
        int err = plain_errno;
        if (plain_errno < 0) {
            mr = call_real(kind, pd, addr, length, iova, access);
            err = errno;
        }
        if (mr == nullptr) bump(kFailures);
        if (g_log_level > 0) log_registration(mr != nullptr, backend, false, length, -1, false, addr, iova, access, err, detail);
        errno = err;
        *out = mr;
        return true;
    }

    unsigned int used = access & ~g_strip;
    if (used != access) note("stripped", access & g_strip, true);
    ibv_mr* mr = g_real.reg_dmabuf_mr(pd, offset, length, iova, fd, static_cast<int>(used));
    int err = errno;
    // the MR holds its own reference to the dma-buf: the fd is ours to close either way
    bool closed = close_export(backend, fd);
    if (mr != nullptr) {
        mr->addr = addr;  // what ibv_reg_mr reports (rdma-core puts the dma-buf offset there)
        bump(kDmabuf);
    } else {
        bump(kFailures);
    }
    if (g_log_level > 0)
        log_registration(mr != nullptr, backend, true, length, static_cast<long long>(offset), closed, addr, iova, used,
                         err, used_detail ? detail : nullptr);
    errno = err;
    *out = mr;
    return true;
}

void log_passthrough(ibv_mr* mr, size_t length, void* addr, uint64_t iova, unsigned int access, int err) {
    if (g_log_level > 1) log_registration(mr != nullptr, Backend::kNone, false, length, -1, false, addr, iova, access, err, nullptr);
}

inline ibv_mr* dispatch(Kind kind, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
    if (t_depth != 0) return call_real(kind, pd, addr, length, iova, access);
    ensure_init();
    bump(kRegistrations);
    ibv_mr* mr = nullptr;
    bool gpu = g_use_hsa || g_use_cuda;
    if (gpu && g_classify_always && register_gpu(kind, pd, addr, length, iova, access, -1, &mr)) return mr;
    mr = call_real(kind, pd, addr, length, iova, access);
    if (mr != nullptr) {
        bump(kPassthrough);
        log_passthrough(mr, length, addr, iova, access, 0);
        return mr;
    }
    // Asking a runtime what a pointer is costs more than the whole passthrough budget (~0.6 us for
    // CUDA on host memory), so by default only a failed plain call pays for it: the NICs this is for
    // refuse GPU memory there, and a NIC that accepts it registers the right bytes anyway.
    int err = errno;
    if (gpu && !g_classify_always && register_gpu(kind, pd, addr, length, iova, access, err, &mr)) return mr;
    bump(kPassthrough);
    bump(kFailures);
    log_passthrough(nullptr, length, addr, iova, access, err);
    errno = err;
    return nullptr;
}

__attribute__((destructor)) void dump_stats() {
    const char* stats = getenv("DMABUF_SHIM_STATS");
    if (stats == nullptr || strcmp(stats, "1") != 0) return;
    shim_logf("dmabuf-shim: stats registrations=%llu dmabuf=%llu passthrough=%llu fallback=%llu failures=%llu\n",
         static_cast<unsigned long long>(g_counters[kRegistrations].value.load()),
         static_cast<unsigned long long>(g_counters[kDmabuf].value.load()),
         static_cast<unsigned long long>(g_counters[kPassthrough].value.load()),
         static_cast<unsigned long long>(g_counters[kFallback].value.load()),
         static_cast<unsigned long long>(g_counters[kFailures].value.load()));
}

}  // namespace

SHIM_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    return dispatch(Kind::kRegMr, pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned int>(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
    return dispatch(Kind::kIova, pd, addr, length, iova, static_cast<unsigned int>(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
    return dispatch(Kind::kIova2, pd, addr, length, iova, access);
}

SHIM_EXPORT const char* dmabuf_shim_version(void) { return DMABUF_SHIM_VERSION; }

// Counters in the order registrations, dmabuf, passthrough, fallback, failures. Returns how many exist.
SHIM_EXPORT int dmabuf_shim_counters(uint64_t* out, int n) {
    for (int i = 0; i < n && i < kNumCounters; i++) out[i] = g_counters[i].value.load(std::memory_order_relaxed);
    return kNumCounters;
}

// "key=value ..." describing what the shim found; resolves everything as the first registration would.
SHIM_EXPORT int dmabuf_shim_probe(char* buf, size_t len) {
    ensure_init();
    Dl_info mine{}, bound{};
    void* winner = dlsym(RTLD_DEFAULT, "ibv_reg_mr");
    bool interposes = winner != nullptr && dladdr(reinterpret_cast<void*>(&dump_stats), &mine) != 0 &&
                      dladdr(winner, &bound) != 0 && mine.dli_fbase == bound.dli_fbase;
    const char* backends = g_use_hsa && g_use_cuda ? "hsa,cuda" : g_use_hsa ? "hsa" : g_use_cuda ? "cuda" : "none";
    return snprintf(buf, len,
                    "version=%s interposes=%d ibverbs=%d reg_mr_iova2=%d reg_dmabuf=%d backends=%s hsa_export_v2=%d "
                    "strip=0x%x log_level=%d classify=%s",
                    DMABUF_SHIM_VERSION, interposes ? 1 : 0, g_real.reg_mr != nullptr ? 1 : 0,
                    g_real.reg_mr_iova2 != nullptr ? 1 : 0, g_real.reg_dmabuf_mr != nullptr ? 1 : 0, backends,
                    g_hsa.export_v2 != nullptr ? 1 : 0, g_strip, g_log_level, g_classify_always ? "always" : "on-failure");
}
