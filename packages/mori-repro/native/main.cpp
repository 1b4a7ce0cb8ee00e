// mori-repro-loopback: does registering a sub-allocated GPU pointer's dma-buf with offset 0 misdirect
// RDMA traffic on this node, and does the exporter's offset fix it? See docs/mori-path.md.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu.hpp"
#include "json.hpp"
#include "options.hpp"
#include "rdma.hpp"

namespace mr {
namespace {

constexpr int EXIT_FIXED = 0;
constexpr int EXIT_INTERNAL = 1;
constexpr int EXIT_USAGE = 2;
constexpr int EXIT_BUG = 10;
constexpr int EXIT_FIX_FAILED = 11;
constexpr int EXIT_ENVIRONMENT = 20;

struct Missing {
    std::string component;  // gpu-runtime | rdma | dma-buf
    std::string detail;
};

struct ModeResult {
    std::string name;  // offset-0 | exporter-offset
    std::string role;  // bug | fix
    uint64_t reg_offset = 0;
    bool registered = false;
    int reg_errno = 0;
    bool fd_closed = false;
    Completion write;
    Completion read;
    bool checked = false;
    bool sentinel_intact = false;
    bool data_at_sub = false;
    bool readback_matches = false;
    int64_t landed_at = -1;  // allocation offset holding the written bytes, -1: nowhere
    std::string outcome;     // correct | misdirected | completion-error | registration-rejected
};

// Deterministic bytes: each mode writes a different pattern so stale data cannot pass for fresh.
void fill_pattern(uint8_t* dst, size_t n, uint64_t seed) {
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        dst[i] = static_cast<uint8_t>(x >> 32);
    }
}

int64_t find_pattern(const std::vector<uint8_t>& image, const std::vector<uint8_t>& pattern) {
    const size_t probe = pattern.size() < 64 ? pattern.size() : 64;
    const uint8_t* hay = image.data();
    size_t left = image.size();
    while (left >= pattern.size()) {
        auto* hit = static_cast<const uint8_t*>(memmem(hay, left, pattern.data(), probe));
        if (hit == nullptr) return -1;
        size_t at = static_cast<size_t>(hit - image.data());
        if (at + pattern.size() <= image.size() && std::memcmp(hit, pattern.data(), pattern.size()) == 0)
            return static_cast<int64_t>(at);
        hay = hit + 1;
        left = image.size() - (at + 1);
    }
    return -1;
}

const char* wc_name(ibv_wc_status s) {
    switch (s) {
        case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
        case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
        case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
        case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
        case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
        case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
        case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
        case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
        case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
        case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
        case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
        case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
        case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
        default: return "IBV_WC_OTHER";
    }
}

std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

Json completion_json(const Completion& c, bool attempted) {
    if (!attempted) return Json();
    return Json::object()
        .set("completed", c.completed)
        .set("status", c.completed ? wc_name(c.status) : "none")
        .set("status_text", c.status_name);
}

class Repro {
   public:
    explicit Repro(Options o) : o_(std::move(o)) {}

    int run();
    Json report() const;
    std::string human() const;

   private:
    void probe_gpu();
    void probe_rdma();
    bool preflight_export();
    // false: stop (internal error or environment discovered mid-run).
    bool run_mode(const std::string& name, const std::string& role, ModeResult* r);
    int verdict();
    std::string describe_failure(const ModeResult& r) const;
    int fail_internal(std::string why) {
        internal_ = std::move(why);
        return finish(EXIT_INTERNAL, "internal error: " + internal_);
    }
    // For the steps of run_mode: record the internal error and stop the run.
    bool stop_internal(std::string why) {
        fail_internal(std::move(why));
        return false;
    }
    int finish(int code, std::string summary) {
        exit_code_ = code;
        summary_ = std::move(summary);
        return code;
    }

    Options o_;
    std::unique_ptr<GpuBackend> gpu_;
    std::unique_ptr<Rdma> rdma_;
    std::vector<Missing> missing_;
    Export preflight_{};
    bool exported_ = false;
    uint64_t base_ = 0;
    uint64_t alloc_base_ = 0;  // kept for the report after the buffer is freed
    std::vector<uint8_t> sentinel_;
    std::vector<uint8_t> image_;
    std::vector<ModeResult> modes_;
    std::string internal_;
    int exit_code_ = EXIT_INTERNAL;
    std::string summary_;
};

void Repro::probe_gpu() {
    auto describe = [](const char* what, const Probe& p) {
        return p.failure == ProbeFailure::LibraryMissing ? std::string(what) + " could not be loaded: " + p.detail
                                                         : p.detail;
    };
    auto component = [](const Probe& p) { return p.failure == ProbeFailure::NoDmabuf ? "dma-buf" : "gpu-runtime"; };
    std::vector<std::pair<const char*, Probe>> tried;
    if (o_.backend == "auto" || o_.backend == "hsa") {
        tried.emplace_back("HSA runtime", open_hsa(o_.gpu));
        if (tried.back().second.backend) {
            gpu_ = std::move(tried.back().second.backend);
            return;
        }
    }
    if (o_.backend == "auto" || o_.backend == "cuda") {
        tried.emplace_back("CUDA driver", open_cuda(o_.gpu, o_.cuda_export));
        if (tried.back().second.backend) {
            gpu_ = std::move(tried.back().second.backend);
            return;
        }
    }
    bool all_absent = true;
    for (auto& t : tried) all_absent = all_absent && t.second.failure == ProbeFailure::LibraryMissing;
    if (all_absent && tried.size() > 1) {
        std::string detail = "no GPU runtime could be loaded: ";
        for (size_t i = 0; i < tried.size(); ++i) detail += (i == 0 ? "" : "; ") + tried[i].second.detail;
        missing_.push_back({"gpu-runtime", detail});
        return;
    }
    // Report the runtimes that are present but unusable; an absent one says nothing useful then.
    for (auto& t : tried) {
        if (t.second.failure != ProbeFailure::LibraryMissing || tried.size() == 1)
            missing_.push_back({component(t.second), describe(t.first, t.second)});
    }
}

void Repro::probe_rdma() {
    RdmaConfig cfg;
    cfg.device = o_.device;
    cfg.port = o_.port;
    cfg.gid_index = o_.gid_index;
    cfg.timeout_ms = o_.timeout_ms;
    auto rdma = std::make_unique<Rdma>(cfg);
    std::string component;
    std::string detail;
    if (!rdma->open(&component, &detail)) {
        missing_.push_back({component, detail});
        return;
    }
    rdma_ = std::move(rdma);
}

bool Repro::preflight_export() {
    std::string err;
    if (!gpu_->alloc(o_.alloc_size, &base_, &err)) {
        fail_internal(err);
        return false;
    }
    alloc_base_ = base_;
    if (!gpu_->export_dmabuf(base_ + o_.sub_offset, o_.sub_size, &preflight_, &err)) {
        missing_.push_back({"dma-buf", err});
        return true;
    }
    exported_ = true;
    std::string close_err;
    if (!gpu_->close_dmabuf(preflight_.fd, &close_err)) {
        fail_internal(close_err);
        return false;
    }
    return true;
}

bool Repro::run_mode(const std::string& name, const std::string& role, ModeResult* r) {
    r->name = name;
    r->role = role;
    std::string err;
    // Reset: sentinel at the base, zeros everywhere else.
    std::fill(image_.begin(), image_.end(), 0);
    std::memcpy(image_.data(), sentinel_.data(), sentinel_.size());
    if (!gpu_->to_device(base_, image_.data(), image_.size(), &err)) return stop_internal(err);

    const uint64_t sub_ptr = base_ + o_.sub_offset;
    Export ex;
    if (!gpu_->export_dmabuf(sub_ptr, o_.sub_size, &ex, &err)) return stop_internal(err);
    r->reg_offset = role == "bug" ? 0 : ex.offset;
    ibv_mr* mr = rdma_->reg_dmabuf(r->reg_offset, o_.sub_size, sub_ptr, ex.fd, &r->reg_errno);
    // The MR holds its own reference to the dma-buf; keeping the fd open would only leak it.
    r->fd_closed = gpu_->close_dmabuf(ex.fd, &err);
    if (!r->fd_closed) {
        if (mr != nullptr) rdma_->dereg(mr);
        return stop_internal(err);
    }
    r->registered = mr != nullptr;
    if (mr == nullptr) {
        int e = r->reg_errno;
        if (e == EOPNOTSUPP || e == ENOSYS || e == EPROTONOSUPPORT) {
            missing_.push_back({"dma-buf", "ibv_reg_dmabuf_mr is not supported by " + o_.device +
                                               (o_.device.empty() ? "the RDMA device" : "") + ": " +
                                               std::strerror(e)});
            return false;
        }
        r->outcome = "registration-rejected";
    }

    std::vector<uint8_t> pattern(o_.sub_size);
    fill_pattern(pattern.data(), pattern.size(), role == "bug" ? 0xB06B06B0ULL : 0xF1F1F1F1ULL);
    if (mr != nullptr) {
        // Host staging: [0, n) is the WRITE source, [n, 2n) receives the READ.
        std::vector<uint8_t> staging(2 * o_.sub_size, 0);
        std::memcpy(staging.data(), pattern.data(), pattern.size());
        ibv_mr* host = rdma_->reg_host(staging.data(), staging.size());
        if (host == nullptr) {
            rdma_->dereg(mr);
            return stop_internal(std::string("ibv_reg_mr of the host staging buffer failed: ") +
                                 std::strerror(errno));
        }
        ibv_qp* qp = rdma_->connect_self(&err);
        bool ok = qp != nullptr;
        const auto n = static_cast<uint32_t>(o_.sub_size);
        if (ok) ok = rdma_->post(qp, IBV_WR_RDMA_WRITE, host, staging.data(), n, sub_ptr, mr->rkey, &r->write, &err);
        if (ok && r->write.status == IBV_WC_SUCCESS)
            ok = rdma_->post(qp, IBV_WR_RDMA_READ, host, staging.data() + n, n, sub_ptr, mr->rkey, &r->read, &err);
        if (qp != nullptr) rdma_->destroy(qp);
        rdma_->dereg(host);
        rdma_->dereg(mr);
        if (!ok) return stop_internal(err);
        r->readback_matches = r->read.completed &&
                              std::memcmp(staging.data() + n, pattern.data(), pattern.size()) == 0;
        for (const Completion* c : {&r->write, &r->read}) {
            if (c->completed && (c->status == IBV_WC_RETRY_EXC_ERR || c->status == IBV_WC_RNR_RETRY_EXC_ERR)) {
                missing_.push_back({"rdma", "the loopback QP on port " + std::to_string(o_.port) +
                                                " GID index " + std::to_string(o_.gid_index) +
                                                " did not reach itself (" + wc_name(c->status) + ")"});
                return false;
            }
        }
    }

    if (!gpu_->to_host(image_.data(), base_, image_.size(), &err)) return stop_internal(err);
    r->checked = true;
    r->sentinel_intact = std::memcmp(image_.data(), sentinel_.data(), sentinel_.size()) == 0;
    r->data_at_sub = std::memcmp(image_.data() + o_.sub_offset, pattern.data(), pattern.size()) == 0;
    r->landed_at = find_pattern(image_, pattern);
    if (r->outcome.empty()) {
        bool completions_ok = r->write.status == IBV_WC_SUCCESS && r->read.completed && r->read.status == IBV_WC_SUCCESS;
        if (!completions_ok) r->outcome = "completion-error";
        else if (r->sentinel_intact && r->data_at_sub && r->readback_matches) r->outcome = "correct";
        else r->outcome = "misdirected";
    }
    return true;
}

std::string Repro::describe_failure(const ModeResult& r) const {
    if (r.outcome == "registration-rejected")
        return "the registration was rejected (errno " + std::to_string(r.reg_errno) + ", " +
               std::strerror(r.reg_errno) + ")";
    if (r.outcome == "completion-error") {
        const Completion& c = r.write.status != IBV_WC_SUCCESS ? r.write : r.read;
        const char* what = &c == &r.write ? "RDMA WRITE" : "RDMA READ";
        return std::string("the ") + what + " completed with " + wc_name(c.status);
    }
    std::string where = r.landed_at < 0 ? "nowhere in the allocation"
                                        : "allocation offset " + std::to_string(r.landed_at);
    std::string text = "the WRITE landed at " + where + " instead of " + std::to_string(o_.sub_offset);
    if (!r.sentinel_intact) text += " and overwrote the sentinel at the base";
    if (r.readback_matches) text += "; the READ through the same MR returned the data, so the round trip looked fine";
    return text;
}

int Repro::verdict() {
    const ModeResult* bug = nullptr;
    const ModeResult* fix = nullptr;
    for (const auto& m : modes_) (m.role == "bug" ? bug : fix) = &m;
    const std::string exporter = std::to_string(exported_ ? preflight_.offset : 0);
    const std::string fix_ok = "with the exporter's offset (" + exporter +
                               ") the data landed at the sub-allocation and the sentinel survived";
    if (fix != nullptr && fix->outcome != "correct")
        return finish(EXIT_FIX_FAILED, "fix not confirmed: with the exporter's offset (" + exporter + ") " +
                                           describe_failure(*fix));
    if (bug != nullptr && bug->outcome != "correct") {
        std::string s = "bug reproduced: with offset 0 " + describe_failure(*bug);
        if (fix != nullptr) s += "; " + fix_ok;
        return finish(EXIT_BUG, s);
    }
    std::string s = fix != nullptr ? "fixed behaviour confirmed: " + fix_ok
                                   : "bug not reproduced: offset 0 landed at the sub-allocation";
    if (bug != nullptr && exported_ && preflight_.offset == 0)
        s += "; offset 0 is harmless here because the exported object starts at the sub-allocation";
    else if (bug != nullptr)
        s += "; offset 0 also landed correctly, so this stack does not show the bug";
    return finish(EXIT_FIXED, s);
}

int Repro::run() {
    probe_gpu();
    probe_rdma();
    if (gpu_ && !preflight_export()) return exit_code_;
    if (!missing_.empty()) {
        std::string what;
        for (size_t i = 0; i < missing_.size(); ++i) what += (i == 0 ? "" : ", ") + missing_[i].component;
        return finish(EXIT_ENVIRONMENT, "environment cannot run this reproducer: missing " + what);
    }
    sentinel_.resize(o_.sub_size);
    fill_pattern(sentinel_.data(), sentinel_.size(), 0x5E47194E15E47ULL);
    image_.resize(o_.alloc_size);
    std::vector<std::pair<std::string, std::string>> plan;
    if (o_.mode != "fix") plan.emplace_back("offset-0", "bug");
    if (o_.mode != "bug") plan.emplace_back("exporter-offset", "fix");
    for (const auto& step : plan) {
        ModeResult r;
        bool go_on = run_mode(step.first, step.second, &r);
        if (r.checked || !r.outcome.empty()) modes_.push_back(r);
        if (!go_on) {
            if (!internal_.empty()) return exit_code_;
            return finish(EXIT_ENVIRONMENT, "environment cannot run this reproducer: missing " +
                                                missing_.back().component);
        }
    }
    gpu_->release(base_);
    base_ = 0;
    return verdict();
}

const char* verdict_name(int code) {
    switch (code) {
        case EXIT_FIXED: return "fixed-behaviour-confirmed";
        case EXIT_BUG: return "bug-reproduced";
        case EXIT_FIX_FAILED: return "fix-not-confirmed";
        case EXIT_ENVIRONMENT: return "environment-cannot-run";
        case EXIT_USAGE: return "usage-error";
        default: return "internal-error";
    }
}

Json Repro::report() const {
    Json missing = Json::array();
    for (const auto& m : missing_) missing.push(Json::object().set("component", m.component).set("detail", m.detail));
    Json modes = Json::array();
    for (const auto& m : modes_) {
        modes.push(Json::object()
                       .set("name", m.name)
                       .set("role", m.role)
                       .set("reg_offset", m.reg_offset)
                       .set("registration", m.registered ? "ok" : "failed")
                       .set("reg_errno", m.reg_errno)
                       .set("fd_closed", m.fd_closed)
                       .set("write", completion_json(m.write, m.registered))
                       .set("read", completion_json(m.read, m.read.completed))
                       .set("sentinel_intact", m.sentinel_intact)
                       .set("data_at_sub_allocation", m.data_at_sub)
                       .set("readback_matches", m.readback_matches)
                       .set("landed_at", m.landed_at < 0 ? Json() : Json(m.landed_at))
                       .set("outcome", m.outcome));
    }
    Json exported;
    if (exported_) {
        exported = Json::object()
                       .set("covers", preflight_.covers)
                       .set("fd_size", preflight_.fd_size)
                       .set("offset", preflight_.offset)
                       .set("object_starts_at", preflight_.object_base - alloc_base_);
    }
    return Json::object()
        .set("tool", "mori-repro-loopback")
        .set("schema", 1)
        .set("exit_code", exit_code_)
        .set("verdict", verdict_name(exit_code_))
        .set("summary", summary_)
        .set("config", Json::object()
                           .set("backend", o_.backend)
                           .set("gpu", o_.gpu)
                           .set("device", o_.device)
                           .set("port", o_.port)
                           .set("gid_index", o_.gid_index)
                           .set("alloc_size", o_.alloc_size)
                           .set("sub_offset", o_.sub_offset)
                           .set("sub_size", o_.sub_size)
                           .set("mode", o_.mode)
                           .set("cuda_export", o_.cuda_export))
        .set("environment", Json::object().set("ok", missing_.empty()).set("missing", missing))
        .set("gpu", gpu_ ? gpu_->describe() : Json())
        .set("allocation", alloc_base_ == 0 ? Json()
                                            : Json::object()
                                                  .set("base", hex(alloc_base_))
                                                  .set("sub_allocation", hex(alloc_base_ + o_.sub_offset)))
        .set("rdma", rdma_ ? rdma_->describe() : Json())
        .set("export", exported)
        .set("modes", modes);
}

std::string Repro::human() const {
    std::string out = "mori-repro: " + summary_ + "\n";
    for (const auto& m : missing_) out += "  missing " + m.component + ": " + m.detail + "\n";
    if (gpu_) out += "  gpu: " + gpu_->summary() + "\n";
    if (rdma_) out += "  rdma: " + rdma_->summary() + "\n";
    if (exported_)
        out += "  export: the fd covers the " + preflight_.covers + " (" + std::to_string(preflight_.fd_size) +
               " bytes); the exporter's offset of the sub-allocation is " + std::to_string(preflight_.offset) + "\n";
    for (const auto& m : modes_) {
        out += "  " + m.name + " (" + m.role + "): registration " + (m.registered ? "ok" : "failed");
        if (!m.registered) out += " errno " + std::to_string(m.reg_errno);
        if (m.write.completed) out += ", WRITE " + std::string(wc_name(m.write.status));
        if (m.read.completed) out += ", READ " + std::string(wc_name(m.read.status));
        out += std::string(", sentinel ") + (m.sentinel_intact ? "intact" : "CORRUPTED");
        out += std::string(", data at sub-allocation ") + (m.data_at_sub ? "yes" : "NO");
        if (m.landed_at >= 0 && !m.data_at_sub) out += " (found at offset " + std::to_string(m.landed_at) + ")";
        out += " -> " + m.outcome + "\n";
    }
    out += "exit " + std::to_string(exit_code_) + " (" + verdict_name(exit_code_) + ")\n";
    return out;
}

}  // namespace
}  // namespace mr

int main(int argc, char** argv) {
    mr::Options options;
    std::string bad = mr::parse_options(argc, argv, &options);
    if (options.help) {
        std::fputs(mr::usage(), stdout);
        return 0;
    }
    if (!bad.empty()) {
        std::fprintf(stderr, "mori-repro-loopback: %s\n%s", bad.c_str(), mr::usage());
        return mr::EXIT_USAGE;
    }
    mr::Repro repro(options);
    int code = repro.run();
    if (options.json)
        std::printf("%s\n", repro.report().dump().c_str());
    else
        std::fputs(repro.human().c_str(), stdout);
    return code;
}
