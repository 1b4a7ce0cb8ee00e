// The verbs side: one device/port, a PD and CQ, and an RC queue pair connected to itself.
// libibverbs is dlopen()ed; verbs.h supplies the ABI (struct layouts and the inline post/poll paths).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "dl.hpp"
#include "json.hpp"

namespace mr {

struct VerbsApi {
    ibv_device** (*get_device_list)(int*);
    void (*free_device_list)(ibv_device**);
    const char* (*get_device_name)(ibv_device*);
    ibv_context* (*open_device)(ibv_device*);
    int (*close_device)(ibv_context*);
    int (*query_device)(ibv_context*, ibv_device_attr*);
    int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
    int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
    ibv_pd* (*alloc_pd)(ibv_context*);
    int (*dealloc_pd)(ibv_pd*);
    ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
    int (*destroy_cq)(ibv_cq*);
    ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
    int (*destroy_qp)(ibv_qp*);
    int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
    ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
    ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
    int (*dereg_mr)(ibv_mr*);
    const char* (*wc_status_str)(ibv_wc_status);
};

struct RdmaConfig {
    std::string device;  // empty: the first device
    int port = 1;
    int gid_index = 1;
    int timeout_ms = 10000;
};

// Outcome of one signaled work request.
struct Completion {
    bool completed = false;  // false: nothing arrived before the deadline
    ibv_wc_status status = IBV_WC_SUCCESS;
    std::string status_name;
};

class Rdma {
   public:
    explicit Rdma(RdmaConfig cfg) : cfg_(std::move(cfg)) {}
    ~Rdma();
    Rdma(const Rdma&) = delete;
    Rdma& operator=(const Rdma&) = delete;

    // On failure says which component the environment lacks ("rdma" or "dma-buf") and exactly what.
    bool open(std::string* component, std::string* missing);
    Json describe() const;
    std::string summary() const;

    ibv_mr* reg_host(void* buf, size_t n);
    ibv_mr* reg_dmabuf(uint64_t offset, size_t length, uint64_t iova, int fd, int* err_no);
    void dereg(ibv_mr* mr) { api_.dereg_mr(mr); }

    // A fresh RC QP per registration: an error completion leaves a QP in the error state.
    ibv_qp* connect_self(std::string* err);
    void destroy(ibv_qp* qp) { api_.destroy_qp(qp); }
    bool post(ibv_qp* qp, ibv_wr_opcode op, ibv_mr* local, void* local_addr, uint32_t length,
              uint64_t remote_addr, uint32_t rkey, Completion* out, std::string* err);

   private:
    bool modify(ibv_qp* qp, ibv_qp_attr* attr, int mask, const char* state, std::string* err);

    RdmaConfig cfg_;
    Library lib_;
    VerbsApi api_{};
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_port_attr port_{};
    ibv_gid gid_{};
    std::string device_name_;
    std::string fw_ver_;
    uint64_t next_wr_id_ = 1;
};

}  // namespace mr
