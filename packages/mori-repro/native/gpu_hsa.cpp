// HSA (ROCm) backend. Prototypes and enum values are declared here, matching hsa.h / hsa_ext_amd.h,
// so the program builds without ROCm installed.
#include <cstring>
#include <string>
#include <vector>

#include "dl.hpp"
#include "gpu.hpp"

namespace mr {
namespace {

using hsa_status_t = int;
struct hsa_agent_t {
    uint64_t handle;
};
struct hsa_amd_memory_pool_t {
    uint64_t handle;
};

constexpr hsa_status_t HSA_STATUS_SUCCESS = 0x0;
constexpr hsa_status_t HSA_STATUS_INFO_BREAK = 0x1;
constexpr int HSA_SYSTEM_INFO_VERSION_MAJOR = 0;
constexpr int HSA_SYSTEM_INFO_VERSION_MINOR = 1;
constexpr int HSA_AGENT_INFO_NAME = 0;
constexpr int HSA_AGENT_INFO_DEVICE = 17;
constexpr int HSA_DEVICE_TYPE_GPU = 1;
constexpr int HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0;
constexpr int HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1;
constexpr int HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5;
constexpr int HSA_AMD_SEGMENT_GLOBAL = 0;
constexpr uint32_t HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4;

struct HsaApi {
    hsa_status_t (*init)();
    hsa_status_t (*shut_down)();
    hsa_status_t (*status_string)(hsa_status_t, const char**);
    hsa_status_t (*system_get_info)(int, void*);
    hsa_status_t (*iterate_agents)(hsa_status_t (*)(hsa_agent_t, void*), void*);
    hsa_status_t (*agent_get_info)(hsa_agent_t, int, void*);
    hsa_status_t (*iterate_pools)(hsa_agent_t, hsa_status_t (*)(hsa_amd_memory_pool_t, void*), void*);
    hsa_status_t (*pool_get_info)(hsa_amd_memory_pool_t, int, void*);
    hsa_status_t (*pool_allocate)(hsa_amd_memory_pool_t, size_t, uint32_t, void**);
    hsa_status_t (*pool_free)(void*);
    hsa_status_t (*memory_lock)(void*, size_t, hsa_agent_t*, int, void**);
    hsa_status_t (*memory_unlock)(void*);
    hsa_status_t (*memory_copy)(void*, const void*, size_t);
    hsa_status_t (*export_dmabuf)(const void*, size_t, int*, uint64_t*);
    hsa_status_t (*close_dmabuf)(int);
};

struct AgentSearch {
    HsaApi* api;
    int wanted;
    int seen = 0;
    hsa_agent_t agent{0};
    bool found = false;
};

struct PoolSearch {
    HsaApi* api;
    hsa_amd_memory_pool_t pool{0};
    bool found = false;
};

class HsaBackend final : public GpuBackend {
   public:
    HsaBackend(Library lib, HsaApi api, hsa_agent_t agent, hsa_amd_memory_pool_t pool, std::string name,
               std::string version)
        : lib_(std::move(lib)), api_(api), agent_(agent), pool_(pool), name_(std::move(name)),
          version_(std::move(version)) {}
    ~HsaBackend() override { api_.shut_down(); }

    Json describe() const override {
        return Json::object()
            .set("backend", "hsa")
            .set("library", lib_.path())
            .set("runtime_version", "HSA " + version_)
            .set("device", name_)
            .set("export_api", "hsa_amd_portable_export_dmabuf");
    }

    std::string summary() const override {
        return "HSA " + version_ + ", agent " + name_ + " (" + lib_.path() + ")";
    }

    bool alloc(size_t size, uint64_t* ptr, std::string* err) override {
        void* p = nullptr;
        if (!check(api_.pool_allocate(pool_, size, 0, &p), "hsa_amd_memory_pool_allocate", err)) return false;
        *ptr = reinterpret_cast<uint64_t>(p);
        return true;
    }

    void release(uint64_t ptr) override { api_.pool_free(reinterpret_cast<void*>(ptr)); }

    bool to_device(uint64_t dst, const void* src, size_t n, std::string* err) override {
        return pinned_copy(const_cast<void*>(src), n, err, [&](void* agent_ptr) {
            return api_.memory_copy(reinterpret_cast<void*>(dst), agent_ptr, n);
        });
    }

    bool to_host(void* dst, uint64_t src, size_t n, std::string* err) override {
        return pinned_copy(dst, n, err, [&](void* agent_ptr) {
            return api_.memory_copy(agent_ptr, reinterpret_cast<const void*>(src), n);
        });
    }

    bool export_dmabuf(uint64_t ptr, size_t size, Export* out, std::string* err) override {
        int fd = -1;
        uint64_t offset = 0;
        if (!check(api_.export_dmabuf(reinterpret_cast<const void*>(ptr), size, &fd, &offset),
                   "hsa_amd_portable_export_dmabuf", err))
            return false;
        out->fd = fd;
        out->offset = offset;
        out->fd_size = fd_object_size(fd);
        out->object_base = ptr - offset;
        out->covers = "allocation";
        return true;
    }

    bool close_dmabuf(int fd, std::string* err) override {
        return check(api_.close_dmabuf(fd), "hsa_amd_portable_close_dmabuf", err);
    }

   private:
    bool check(hsa_status_t status, const char* what, std::string* err) const {
        if (status == HSA_STATUS_SUCCESS) return true;
        const char* text = nullptr;
        if (api_.status_string == nullptr || api_.status_string(status, &text) != HSA_STATUS_SUCCESS ||
            text == nullptr)
            text = "HSA error";
        char code[32];
        std::snprintf(code, sizeof code, " (0x%x)", static_cast<unsigned>(status));
        *err = std::string(what) + " failed: " + text + code;
        return false;
    }

    // Pageable host memory is pinned for the GPU for the duration of one synchronous copy.
    template <typename Copy>
    bool pinned_copy(void* host, size_t n, std::string* err, Copy copy) {
        void* agent_ptr = nullptr;
        hsa_agent_t agent = agent_;
        if (!check(api_.memory_lock(host, n, &agent, 1, &agent_ptr), "hsa_amd_memory_lock", err)) return false;
        bool ok = check(copy(agent_ptr), "hsa_memory_copy", err);
        std::string unlock_err;
        if (!check(api_.memory_unlock(host), "hsa_amd_memory_unlock", &unlock_err) && ok) {
            *err = unlock_err;
            ok = false;
        }
        return ok;
    }

    Library lib_;
    HsaApi api_;
    hsa_agent_t agent_;
    hsa_amd_memory_pool_t pool_;
    std::string name_;
    std::string version_;
};

hsa_status_t find_gpu(hsa_agent_t agent, void* data) {
    auto* s = static_cast<AgentSearch*>(data);
    int type = -1;
    if (s->api->agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
    if (type != HSA_DEVICE_TYPE_GPU) return HSA_STATUS_SUCCESS;
    if (s->seen++ == s->wanted) {
        s->agent = agent;
        s->found = true;
        return HSA_STATUS_INFO_BREAK;
    }
    return HSA_STATUS_SUCCESS;
}

// VRAM is the GPU's coarse-grained global pool that the runtime may allocate from.
hsa_status_t find_vram_pool(hsa_amd_memory_pool_t pool, void* data) {
    auto* s = static_cast<PoolSearch*>(data);
    int segment = -1;
    uint32_t flags = 0;
    bool alloc_allowed = false;
    if (s->api->pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment) != HSA_STATUS_SUCCESS ||
        segment != HSA_AMD_SEGMENT_GLOBAL)
        return HSA_STATUS_SUCCESS;
    if (s->api->pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags) != HSA_STATUS_SUCCESS ||
        (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) == 0)
        return HSA_STATUS_SUCCESS;
    if (s->api->pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc_allowed) !=
            HSA_STATUS_SUCCESS ||
        !alloc_allowed)
        return HSA_STATUS_SUCCESS;
    s->pool = pool;
    s->found = true;
    return HSA_STATUS_INFO_BREAK;
}

}  // namespace

Probe open_hsa(int gpu_index) {
    Probe probe;
    Library lib;
    std::string error;
    if (!lib.open("MORI_REPRO_LIBHSA", "libhsa-runtime64.so.1", &error)) {
        probe.failure = ProbeFailure::LibraryMissing;
        probe.library = lib.path();
        probe.detail = error;
        return probe;
    }
    probe.library = lib.path();
    HsaApi api{};
    const char* missing = nullptr;
    auto need = [&](const char* name, auto* slot) {
        if (!lib.sym(name, slot) && missing == nullptr) missing = name;
    };
    need("hsa_init", &api.init);
    need("hsa_shut_down", &api.shut_down);
    need("hsa_iterate_agents", &api.iterate_agents);
    need("hsa_agent_get_info", &api.agent_get_info);
    need("hsa_amd_agent_iterate_memory_pools", &api.iterate_pools);
    need("hsa_amd_memory_pool_get_info", &api.pool_get_info);
    need("hsa_amd_memory_pool_allocate", &api.pool_allocate);
    need("hsa_amd_memory_pool_free", &api.pool_free);
    need("hsa_amd_memory_lock", &api.memory_lock);
    need("hsa_amd_memory_unlock", &api.memory_unlock);
    need("hsa_memory_copy", &api.memory_copy);
    if (missing != nullptr) {
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = std::string(lib.path()) + " lacks " + missing;
        return probe;
    }
    // Only used for messages and the report.
    lib.sym("hsa_status_string", &api.status_string);
    lib.sym("hsa_system_get_info", &api.system_get_info);
    if (api.init() != HSA_STATUS_SUCCESS) {
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = "hsa_init failed (no usable /dev/kfd or no AMD GPU)";
        return probe;
    }
    AgentSearch agents{&api, gpu_index};
    api.iterate_agents(find_gpu, &agents);
    if (!agents.found) {
        api.shut_down();
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = "hsa_iterate_agents found " + std::to_string(agents.seen) + " GPU agent(s); index " +
                       std::to_string(gpu_index) + " requested";
        return probe;
    }
    PoolSearch pools{&api};
    api.iterate_pools(agents.agent, find_vram_pool, &pools);
    if (!pools.found) {
        api.shut_down();
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = "GPU agent has no coarse-grained global memory pool";
        return probe;
    }
    // The export entry points arrived in ROCm 5.6; older runtimes cannot run this reproducer at all.
    if (!lib.sym("hsa_amd_portable_export_dmabuf", &api.export_dmabuf) ||
        !lib.sym("hsa_amd_portable_close_dmabuf", &api.close_dmabuf)) {
        api.shut_down();
        probe.failure = ProbeFailure::NoDmabuf;
        probe.detail = lib.path() + " lacks hsa_amd_portable_export_dmabuf (ROCm >= 5.6 needed)";
        return probe;
    }
    char name[64] = {0};
    api.agent_get_info(agents.agent, HSA_AGENT_INFO_NAME, name);
    name[sizeof name - 1] = '\0';
    std::string version = "unknown";
    uint16_t major = 0;
    uint16_t minor = 0;
    if (api.system_get_info != nullptr &&
        api.system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major) == HSA_STATUS_SUCCESS &&
        api.system_get_info(HSA_SYSTEM_INFO_VERSION_MINOR, &minor) == HSA_STATUS_SUCCESS)
        version = std::to_string(major) + "." + std::to_string(minor);
    probe.backend =
        std::make_unique<HsaBackend>(std::move(lib), api, agents.agent, pools.pool, name, version);
    return probe;
}

}  // namespace mr
