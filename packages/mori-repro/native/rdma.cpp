#include "rdma.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mr {

namespace {

const char* port_state_name(int state) {
    switch (state) {
        case IBV_PORT_DOWN: return "DOWN";
        case IBV_PORT_INIT: return "INIT";
        case IBV_PORT_ARMED: return "ARMED";
        case IBV_PORT_ACTIVE: return "ACTIVE";
        case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
        default: return "NOP";
    }
}

std::string gid_text(const ibv_gid& gid) {
    char buf[48];
    const uint8_t* r = gid.raw;
    std::snprintf(buf, sizeof buf, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0],
                  r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
    return buf;
}

bool gid_empty(const ibv_gid& gid) {
    for (uint8_t b : gid.raw)
        if (b != 0) return false;
    return true;
}

}  // namespace

Rdma::~Rdma() {
    if (cq_ != nullptr) api_.destroy_cq(cq_);
    if (pd_ != nullptr) api_.dealloc_pd(pd_);
    if (ctx_ != nullptr) api_.close_device(ctx_);
}

bool Rdma::open(std::string* component, std::string* missing) {
    *component = "rdma";
    std::string error;
    if (!lib_.open("MORI_REPRO_LIBIBVERBS", "libibverbs.so.1", &error)) {
        *missing = "libibverbs could not be loaded: " + error;
        return false;
    }
    const char* absent = nullptr;
    auto need = [&](const char* name, auto* slot) {
        if (!lib_.sym(name, slot) && absent == nullptr) absent = name;
    };
    need("ibv_get_device_list", &api_.get_device_list);
    need("ibv_free_device_list", &api_.free_device_list);
    need("ibv_get_device_name", &api_.get_device_name);
    need("ibv_open_device", &api_.open_device);
    need("ibv_close_device", &api_.close_device);
    need("ibv_query_port", &api_.query_port);
    need("ibv_query_gid", &api_.query_gid);
    need("ibv_alloc_pd", &api_.alloc_pd);
    need("ibv_dealloc_pd", &api_.dealloc_pd);
    need("ibv_create_cq", &api_.create_cq);
    need("ibv_destroy_cq", &api_.destroy_cq);
    need("ibv_create_qp", &api_.create_qp);
    need("ibv_destroy_qp", &api_.destroy_qp);
    need("ibv_modify_qp", &api_.modify_qp);
    need("ibv_reg_mr", &api_.reg_mr);
    need("ibv_dereg_mr", &api_.dereg_mr);
    if (absent != nullptr) {
        *missing = lib_.path() + " lacks " + absent;
        return false;
    }
    // Only used for the report.
    lib_.sym("ibv_query_device", &api_.query_device);
    lib_.sym("ibv_wc_status_str", &api_.wc_status_str);
    // rdma-core 34 added dma-buf registration; without it the reproducer has nothing to test.
    if (!lib_.sym("ibv_reg_dmabuf_mr", &api_.reg_dmabuf_mr)) {
        *component = "dma-buf";
        *missing = lib_.path() + " lacks ibv_reg_dmabuf_mr (rdma-core >= 34 needed)";
        return false;
    }

    int count = 0;
    ibv_device** list = api_.get_device_list(&count);
    if (list == nullptr || count == 0) {
        if (list != nullptr) api_.free_device_list(list);
        *missing = "libibverbs found no RDMA device";
        return false;
    }
    ibv_device* chosen = nullptr;
    std::string names;
    for (int i = 0; i < count; ++i) {
        const char* name = api_.get_device_name(list[i]);
        names += (i == 0 ? "" : ", ") + std::string(name);
        if (chosen == nullptr && (cfg_.device.empty() || cfg_.device == name)) chosen = list[i];
    }
    if (chosen == nullptr) {
        api_.free_device_list(list);
        *missing = "RDMA device '" + cfg_.device + "' not found (available: " + names + ")";
        return false;
    }
    device_name_ = api_.get_device_name(chosen);
    ctx_ = api_.open_device(chosen);
    api_.free_device_list(list);
    if (ctx_ == nullptr) {
        *missing = "ibv_open_device(" + device_name_ + ") failed: " + std::strerror(errno);
        return false;
    }
    ibv_device_attr dev_attr{};
    if (api_.query_device != nullptr && api_.query_device(ctx_, &dev_attr) == 0) fw_ver_ = dev_attr.fw_ver;
    if (api_.query_port(ctx_, static_cast<uint8_t>(cfg_.port), &port_) != 0) {
        *missing = device_name_ + " has no port " + std::to_string(cfg_.port);
        return false;
    }
    if (port_.state != IBV_PORT_ACTIVE) {
        *missing = device_name_ + " port " + std::to_string(cfg_.port) + " is " + port_state_name(port_.state) +
                   ", not ACTIVE";
        return false;
    }
    if (api_.query_gid(ctx_, static_cast<uint8_t>(cfg_.port), cfg_.gid_index, &gid_) != 0 ||
        (port_.link_layer == IBV_LINK_LAYER_ETHERNET && gid_empty(gid_))) {
        *missing = device_name_ + " port " + std::to_string(cfg_.port) + " has no GID at index " +
                   std::to_string(cfg_.gid_index);
        return false;
    }
    pd_ = api_.alloc_pd(ctx_);
    cq_ = pd_ != nullptr ? api_.create_cq(ctx_, 16, nullptr, nullptr, 0) : nullptr;
    if (cq_ == nullptr) {
        *missing = "could not allocate a PD and CQ on " + device_name_ + ": " + std::strerror(errno);
        return false;
    }
    return true;
}

Json Rdma::describe() const {
    return Json::object()
        .set("library", lib_.path())
        .set("device", device_name_)
        .set("fw_ver", fw_ver_)
        .set("port", cfg_.port)
        .set("link_layer", port_.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand")
        .set("active_mtu", 128 << port_.active_mtu)
        .set("gid_index", cfg_.gid_index)
        .set("gid", gid_text(gid_));
}

std::string Rdma::summary() const {
    return device_name_ + " port " + std::to_string(cfg_.port) + " (" +
           (port_.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand") + ", MTU " +
           std::to_string(128 << port_.active_mtu) + "), GID[" + std::to_string(cfg_.gid_index) + "] " +
           gid_text(gid_) + ", firmware " + (fw_ver_.empty() ? "unknown" : fw_ver_);
}

ibv_mr* Rdma::reg_host(void* buf, size_t n) {
    // The staging buffer is only a local SGE (WRITE source, READ sink): local write is all it needs.
    return api_.reg_mr(pd_, buf, n, IBV_ACCESS_LOCAL_WRITE);
}

ibv_mr* Rdma::reg_dmabuf(uint64_t offset, size_t length, uint64_t iova, int fd, int* err_no) {
    errno = 0;
    ibv_mr* mr = api_.reg_dmabuf_mr(pd_, offset, length, iova, fd,
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    *err_no = mr == nullptr ? errno : 0;
    return mr;
}

bool Rdma::modify(ibv_qp* qp, ibv_qp_attr* attr, int mask, const char* state, std::string* err) {
    int rc = api_.modify_qp(qp, attr, mask);
    if (rc != 0) {
        *err = std::string("ibv_modify_qp to ") + state + " failed: " + std::strerror(rc);
        return false;
    }
    return true;
}

ibv_qp* Rdma::connect_self(std::string* err) {
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = api_.create_qp(pd_, &init);
    if (qp == nullptr) {
        *err = std::string("ibv_create_qp(RC) failed: ") + std::strerror(errno);
        return nullptr;
    }
    const auto port = static_cast<uint8_t>(cfg_.port);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    bool ok = modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT", err);
    if (ok) {
        a = ibv_qp_attr{};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = port_.active_mtu;
        a.dest_qp_num = qp->qp_num;  // loopback: the QP is its own peer
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.port_num = port;
        a.ah_attr.dlid = port_.lid;
        if (port_.link_layer == IBV_LINK_LAYER_ETHERNET) {  // RoCE addresses by GID, never by LID
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = gid_;
            a.ah_attr.grh.sgid_index = static_cast<uint8_t>(cfg_.gid_index);
            a.ah_attr.grh.hop_limit = 1;
        }
        ok = modify(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                    "RTR", err);
    }
    if (ok) {
        a = ibv_qp_attr{};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = 0;
        a.max_rd_atomic = 1;
        ok = modify(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC,
                    "RTS", err);
    }
    if (!ok) {
        api_.destroy_qp(qp);
        return nullptr;
    }
    return qp;
}

bool Rdma::post(ibv_qp* qp, ibv_wr_opcode op, ibv_mr* local, void* local_addr, uint32_t length,
                uint64_t remote_addr, uint32_t rkey, Completion* out, std::string* err) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(local_addr);
    sge.length = length;
    sge.lkey = local->lkey;
    ibv_send_wr wr{};
    wr.wr_id = next_wr_id_++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp, &wr, &bad);  // inline: dispatches through the provider's ops table
    if (rc != 0) {
        *err = std::string("ibv_post_send failed: ") + std::strerror(rc);
        return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.timeout_ms);
    ibv_wc wc{};
    while (true) {
        int n = ibv_poll_cq(cq_, 1, &wc);
        if (n < 0) {
            *err = "ibv_poll_cq failed";
            return false;
        }
        if (n == 1 && wc.wr_id == wr.wr_id) break;
        if (std::chrono::steady_clock::now() > deadline) {
            out->completed = false;
            *err = std::string("no completion for ") + (op == IBV_WR_RDMA_WRITE ? "RDMA WRITE" : "RDMA READ") +
                   " within " + std::to_string(cfg_.timeout_ms) + " ms";
            return false;
        }
    }
    out->completed = true;
    out->status = wc.status;
    out->status_name = api_.wc_status_str != nullptr ? api_.wc_status_str(wc.status) : "";
    return true;
}

}  // namespace mr
