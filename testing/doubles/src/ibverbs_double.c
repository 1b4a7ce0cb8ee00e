/* Test double of libibverbs (rdma-core) modelling one RoCE NIC that behaves like ionic:
 * host memory registers plainly, device memory only through dma-buf, and an RC QP
 * connected to another QP of this process carries RDMA WRITE/READ through the MRs'
 * translations, completing with the statuses a real NIC reports.
 * Compiled against the real <infiniband/verbs.h>, so every struct is the real ABI. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_double.h"

/* verbs.h wraps these names in inline helpers; the library defines the functions themselves */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

#define EXPORT __attribute__((visibility("default")))
#define PAGE_MASK_LOW (GPU_DOUBLE_PAGE - 1)
#define KEY_L 0x11u
#define KEY_R 0x22u
#define MAX_SGE 16
#define MAX_WR 4096
#define MAX_INLINE 64

struct dbl_pd {
	struct ibv_pd pd;
	int refs;
};

struct dbl_mr {
	struct ibv_mr mr;
	uint8_t *host; /* where iova maps */
	uint64_t iova;
	size_t length;
	unsigned int access;
};

struct dbl_cq {
	struct ibv_cq cq;
	struct ibv_wc *ring;
	int cap, head, count, refs;
};

struct dbl_qp {
	struct ibv_qp qp;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	unsigned int qp_access;
	uint32_t dest_qpn;
	struct dbl_qp *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* MR table, QP list, PD/CQ refs */
static struct dbl_mr **g_mrs;
static uint32_t g_mr_cap, g_mr_next = 1, g_mr_live;
static struct dbl_qp *g_qps;
static uint32_t g_next_qpn = 0x100;
static struct ibv_device g_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "ionic_dbl0",
	.dev_name = "uverbs_dbl0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs_dbl0",
	.ibdev_path = "/sys/class/infiniband/ionic_dbl0",
};

/* ---- devices ---------------------------------------------------------------------- */

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));
	if (list == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &g_dev;
	if (num_devices != NULL)
		*num_devices = 1;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

static int dbl_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
static int dbl_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
static int dbl_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (device != &g_dev) {
		errno = ENODEV;
		return NULL;
	}
	struct ibv_context *ctx = calloc(1, sizeof(*ctx));
	if (ctx == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->device = device;
	ctx->ops.poll_cq = dbl_poll_cq;
	ctx->ops.post_send = dbl_post_send;
	ctx->ops.post_recv = dbl_post_recv;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = NULL; /* not an extended context: inline helpers use the exported functions */
	pthread_mutex_init(&ctx->mutex, NULL);
	return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	pthread_mutex_destroy(&context->mutex);
	free(context);
	return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	(void)context;
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "1.0.0-double");
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = GPU_DOUBLE_PAGE;
	attr->vendor_id = 0x1dd8; /* AMD Pensando */
	attr->max_qp = 1024;
	attr->max_qp_wr = MAX_WR;
	attr->max_sge = MAX_SGE;
	attr->max_cq = 1024;
	attr->max_cqe = 65536;
	attr->max_mr = 1 << 20;
	attr->max_pd = 1024;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->phys_port_cnt = 1;
	return 0;
}

EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *compat)
{
	(void)context;
	if (port_num != 1)
		return EINVAL;
	/* the caller's struct is a full ibv_port_attr, zeroed by the inline wrapper */
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_4096;
	attr->gid_tbl_len = 2;
	attr->max_msg_sz = 1u << 31;
	attr->pkey_tbl_len = 1;
	attr->active_width = 2;
	attr->active_speed = 64;
	attr->phys_state = 5; /* LinkUp */
	attr->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	(void)context;
	if (port_num != 1 || index < 0 || index > 1) {
		errno = EINVAL;
		return -1;
	}
	memset(gid, 0, sizeof(*gid));
	if (index == 0) { /* fe80::1 link-local */
		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		gid->raw[15] = 1;
	} else { /* ::ffff:127.0.0.1, the IPv4 RoCEv2 entry at GID 1, the programs' default index */
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		gid->raw[12] = 127;
		gid->raw[15] = 1;
	}
	return 0;
}

/* ---- protection domains ------------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct dbl_pd *p = calloc(1, sizeof(*p));
	if (p == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = context;
	return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct dbl_pd *p = (struct dbl_pd *)pd;
	pthread_mutex_lock(&g_lock);
	int busy = p->refs != 0;
	pthread_mutex_unlock(&g_lock);
	if (busy)
		return EBUSY;
	free(p);
	return 0;
}

/* ---- memory regions ------------------------------------------------------------------ */

static unsigned int g_reject_access;
static pthread_once_t g_reject_once = PTHREAD_ONCE_INIT;

static void read_reject_access(void)
{
	/* IBV_DOUBLE_REJECT_ACCESS=0x8 models firmware that refuses some access flags */
	const char *s = getenv("IBV_DOUBLE_REJECT_ACCESS");
	g_reject_access = s ? (unsigned int)strtoul(s, NULL, 0) : 0;
}

static int check_access(unsigned int access)
{
	const unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
				   IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE;
	pthread_once(&g_reject_once, read_reject_access);
	if (access & ~known)
		return EINVAL;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL; /* the verbs rule: remote write needs local write */
	if (access & IBV_ACCESS_ON_DEMAND)
		return EOPNOTSUPP; /* no ODP on this NIC */
	if (access & g_reject_access)
		return EINVAL;
	return 0;
}

static struct ibv_mr *new_mr(struct ibv_pd *pd, uint8_t *host, uint64_t iova, size_t length, unsigned int access,
			     void *reported_addr)
{
	struct dbl_mr *m = calloc(1, sizeof(*m));
	if (m == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	m->host = host;
	m->iova = iova;
	m->length = length;
	m->access = access;
	pthread_mutex_lock(&g_lock);
	if (g_mr_next >= g_mr_cap) {
		uint32_t cap = g_mr_cap ? g_mr_cap * 2 : 1024;
		struct dbl_mr **grown = realloc(g_mrs, cap * sizeof(*grown));
		if (grown == NULL || cap >= (1u << 24)) {
			pthread_mutex_unlock(&g_lock);
			free(m);
			errno = ENOMEM;
			return NULL;
		}
		memset(grown + g_mr_cap, 0, (cap - g_mr_cap) * sizeof(*grown));
		g_mrs = grown;
		g_mr_cap = cap;
	}
	uint32_t index = g_mr_next++;
	g_mrs[index] = m;
	g_mr_live++;
	((struct dbl_pd *)pd)->refs++;
	pthread_mutex_unlock(&g_lock);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = reported_addr;
	m->mr.length = length;
	m->mr.handle = index;
	m->mr.lkey = (index << 8) | KEY_L;
	m->mr.rkey = (index << 8) | KEY_R;
	return &m->mr;
}

static int range_mapped(uint64_t addr, size_t length)
{
	uint64_t start = addr & ~PAGE_MASK_LOW;
	uint64_t end = (addr + length + PAGE_MASK_LOW) & ~PAGE_MASK_LOW;
	return msync((void *)start, end - start, MS_ASYNC) == 0;
}

static struct ibv_mr *reg_user(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	int err = pd == NULL || length == 0 ? EINVAL : check_access(access);
	if (err == 0 && (((uint64_t)addr ^ iova) & PAGE_MASK_LOW))
		err = EINVAL; /* iova must share addr's offset in the page */
	if (err == 0 && ((uint64_t)addr + length < (uint64_t)addr))
		err = EINVAL;
	if (err == 0 && gpu_double_in_aperture((uint64_t)addr, length))
		err = EINVAL; /* ionic: device memory registers only through dma-buf */
	if (err == 0 && !range_mapped((uint64_t)addr, length))
		err = EFAULT;
	if (err != 0) {
		errno = err;
		return NULL;
	}
	return new_mr(pd, addr, iova, length, access, addr);
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_user(pd, addr, length, (uint64_t)addr, (unsigned int)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_user(pd, addr, length, iova, (unsigned int)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	return reg_user(pd, addr, length, iova, access);
}

#ifndef IBV_DOUBLE_NO_DMABUF /* -DIBV_DOUBLE_NO_DMABUF: an rdma-core older than 34 (no IBVERBS_1.12) */
/* Where the object behind a dma-buf fd lives, from the exporter's memfd name. */
static int resolve_dmabuf(int fd, uint64_t *base, uint64_t *size)
{
	char path[64], target[256];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return EBADF;
	target[n] = '\0';
	const char *tag = strstr(target, GPU_DOUBLE_DMABUF_SUFFIX);
	if (strncmp(target, "/memfd:", 7) != 0 || tag == NULL)
		return EINVAL; /* not a dma-buf */
	int pid = 0;
	uint64_t b = 0;
	if (sscanf(tag + strlen(GPU_DOUBLE_DMABUF_SUFFIX), "%d:%" SCNx64, &pid, &b) != 2 || pid != getpid())
		return EINVAL; /* exported by another process: this double cannot map it */
	struct stat st;
	if (fstat(fd, &st) != 0)
		return EBADF;
	*base = b;
	*size = (uint64_t)st.st_size;
	return 0;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					int access)
{
	int err = pd == NULL ? EINVAL : check_access((unsigned int)access);
	if (err == 0 && (fd < 0 || fcntl(fd, F_GETFD) < 0))
		err = EBADF;
	uint64_t base = 0, size = 0;
	if (err == 0)
		err = resolve_dmabuf(fd, &base, &size);
	if (err == 0 && (length == 0 || offset + length < offset || offset + length > size))
		err = EINVAL; /* the MR must lie inside the exported object */
	if (err == 0 && ((offset ^ iova) & PAGE_MASK_LOW))
		err = EINVAL; /* iova must share offset's offset in the page */
	if (err != 0) {
		errno = err;
		return NULL;
	}
	/* the MR maps [offset, offset + length) of the object; it stays valid after fd is closed.
	 * rdma-core reports the dma-buf offset as mr->addr for these MRs. */
	return new_mr(pd, (uint8_t *)(base + offset), iova, length, (unsigned int)access, (void *)(uintptr_t)offset);
}
#endif

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	uint32_t index = mr->handle;
	pthread_mutex_lock(&g_lock);
	if (index >= g_mr_cap || g_mrs[index] != (struct dbl_mr *)mr) {
		pthread_mutex_unlock(&g_lock);
		return EINVAL;
	}
	g_mrs[index] = NULL;
	g_mr_live--;
	((struct dbl_pd *)mr->pd)->refs--;
	pthread_mutex_unlock(&g_lock);
	free(mr);
	return 0;
}

/* ---- completion queues --------------------------------------------------------------- */

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	if (cqe < 1 || cqe > 65536) {
		errno = EINVAL;
		return NULL;
	}
	struct dbl_cq *c = calloc(1, sizeof(*c));
	struct ibv_wc *ring = calloc((size_t)cqe, sizeof(*ring));
	if (c == NULL || ring == NULL) {
		free(c);
		free(ring);
		errno = ENOMEM;
		return NULL;
	}
	c->ring = ring;
	c->cap = cqe;
	c->cq.context = context;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct dbl_cq *c = (struct dbl_cq *)cq;
	pthread_mutex_lock(&g_lock);
	int busy = c->refs != 0;
	pthread_mutex_unlock(&g_lock);
	if (busy)
		return EBUSY;
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c->ring);
	free(c);
	return 0;
}

static int cq_push(struct ibv_cq *cq, const struct ibv_wc *wc)
{
	struct dbl_cq *c = (struct dbl_cq *)cq;
	pthread_mutex_lock(&cq->mutex);
	int ok = c->count < c->cap;
	if (ok) {
		c->ring[(c->head + c->count) % c->cap] = *wc;
		c->count++;
	}
	pthread_mutex_unlock(&cq->mutex);
	return ok;
}

static int cq_room(struct ibv_cq *cq)
{
	struct dbl_cq *c = (struct dbl_cq *)cq;
	pthread_mutex_lock(&cq->mutex);
	int room = c->cap - c->count;
	pthread_mutex_unlock(&cq->mutex);
	return room;
}

static int dbl_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	struct dbl_cq *c = (struct dbl_cq *)cq;
	int n = 0;
	pthread_mutex_lock(&cq->mutex);
	while (n < num_entries && c->count > 0) {
		wc[n++] = c->ring[c->head];
		c->head = (c->head + 1) % c->cap;
		c->count--;
	}
	pthread_mutex_unlock(&cq->mutex);
	return n;
}

/* ---- queue pairs ------------------------------------------------------------------- */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (pd == NULL || attr == NULL || attr->send_cq == NULL || attr->recv_cq == NULL) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP; /* the double models RC only (UD fails on ionic too) */
		return NULL;
	}
	if (attr->cap.max_send_wr > MAX_WR || attr->cap.max_send_sge > MAX_SGE ||
	    attr->cap.max_recv_wr > MAX_WR || attr->cap.max_recv_sge > MAX_SGE ||
	    attr->cap.max_inline_data > MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	struct dbl_qp *q = calloc(1, sizeof(*q));
	if (q == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	q->cap = attr->cap;
	q->sq_sig_all = attr->sq_sig_all;
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.qp_type = attr->qp_type;
	q->qp.state = IBV_QPS_RESET;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	pthread_mutex_lock(&g_lock);
	q->qp.qp_num = g_next_qpn++;
	q->qp.handle = q->qp.qp_num;
	q->next = g_qps;
	g_qps = q;
	((struct dbl_pd *)pd)->refs++;
	((struct dbl_cq *)attr->send_cq)->refs++;
	((struct dbl_cq *)attr->recv_cq)->refs++;
	pthread_mutex_unlock(&g_lock);
	return &q->qp;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct dbl_qp *q = (struct dbl_qp *)qp;
	pthread_mutex_lock(&g_lock);
	struct dbl_qp **link = &g_qps;
	while (*link != NULL && *link != q)
		link = &(*link)->next;
	if (*link == NULL) {
		pthread_mutex_unlock(&g_lock);
		return EINVAL;
	}
	*link = q->next;
	((struct dbl_pd *)qp->pd)->refs--;
	((struct dbl_cq *)qp->send_cq)->refs--;
	((struct dbl_cq *)qp->recv_cq)->refs--;
	pthread_mutex_unlock(&g_lock);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct dbl_qp *q = (struct dbl_qp *)qp;
	if (!(attr_mask & IBV_QP_STATE))
		return EINVAL;
	enum ibv_qp_state cur = qp->state, next = attr->qp_state;
	int need = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
		need = 0;
	} else if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
		need = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
		need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		       IBV_QP_MIN_RNR_TIMER;
	} else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
		need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	} else if (cur == next && (cur == IBV_QPS_INIT || cur == IBV_QPS_RTS)) {
		need = 0;
	} else {
		return EINVAL; /* not a legal transition */
	}
	if ((attr_mask & need) != need)
		return EINVAL;
	if ((attr_mask & IBV_QP_PORT) && attr->port_num != 1)
		return EINVAL;
	if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
		if (!attr->ah_attr.is_global || attr->ah_attr.grh.sgid_index > 1)
			return EINVAL; /* RoCE needs a GRH with a valid source GID */
		q->dest_qpn = attr->dest_qp_num;
	}
	if (attr_mask & IBV_QP_ACCESS_FLAGS)
		q->qp_access = attr->qp_access_flags;
	qp->state = next;
	return 0;
}

static struct dbl_mr *mr_by_key(uint32_t key, uint32_t tag)
{
	uint32_t index = key >> 8;
	if ((key & 0xff) != tag || index == 0 || index >= g_mr_cap)
		return NULL;
	return g_mrs[index];
}

static int mr_covers(const struct dbl_mr *m, uint64_t addr, uint64_t len)
{
	return addr >= m->iova && addr + len >= addr && addr + len <= m->iova + m->length;
}

static struct dbl_qp *qp_by_num(uint32_t qpn)
{
	for (struct dbl_qp *q = g_qps; q != NULL; q = q->next)
		if (q->qp.qp_num == qpn)
			return q;
	return NULL;
}

/* Runs one WR against its peer; the caller holds g_lock. Returns a work completion status. */
static enum ibv_wc_status execute(struct dbl_qp *q, struct ibv_send_wr *wr, uint32_t *byte_len)
{
	uint64_t total = 0;
	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	*byte_len = (uint32_t)total;
	int is_write = wr->opcode == IBV_WR_RDMA_WRITE;
	int inline_data = is_write && (wr->send_flags & IBV_SEND_INLINE);
	if (inline_data && total > q->cap.max_inline_data)
		return IBV_WC_LOC_LEN_ERR;
	/* local side first, as the requester checks its own keys before sending */
	struct dbl_mr *local[MAX_SGE];
	for (int i = 0; i < wr->num_sge && !inline_data; i++) {
		struct ibv_sge *s = &wr->sg_list[i];
		local[i] = mr_by_key(s->lkey, KEY_L);
		if (local[i] == NULL || local[i]->mr.pd != q->qp.pd || !mr_covers(local[i], s->addr, s->length))
			return IBV_WC_LOC_PROT_ERR;
		if (!is_write && !(local[i]->access & IBV_ACCESS_LOCAL_WRITE))
			return IBV_WC_LOC_PROT_ERR;
	}
	struct dbl_qp *peer = qp_by_num(q->dest_qpn);
	if (peer == NULL || (peer->qp.state != IBV_QPS_RTR && peer->qp.state != IBV_QPS_RTS))
		return IBV_WC_RETRY_EXC_ERR; /* nobody answers */
	unsigned int need = is_write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	struct dbl_mr *remote = mr_by_key(wr->wr.rdma.rkey, KEY_R);
	if (remote == NULL || remote->mr.pd != peer->qp.pd || !(remote->access & need) ||
	    !(peer->qp_access & need) || !mr_covers(remote, wr->wr.rdma.remote_addr, total))
		return IBV_WC_REM_ACCESS_ERR;
	uint8_t *far = remote->host + (wr->wr.rdma.remote_addr - remote->iova);
	for (int i = 0; i < wr->num_sge; i++) {
		struct ibv_sge *s = &wr->sg_list[i];
		uint8_t *near = inline_data ? (uint8_t *)(uintptr_t)s->addr : local[i]->host + (s->addr - local[i]->iova);
		if (is_write)
			memmove(far, near, s->length);
		else
			memmove(near, far, s->length);
		far += s->length;
	}
	return IBV_WC_SUCCESS;
}

static int dbl_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct dbl_qp *q = (struct dbl_qp *)qp;
	int rc = 0;
	pthread_mutex_lock(&g_lock);
	for (; wr != NULL; wr = wr->next) {
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
			rc = EINVAL;
			break;
		}
		if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_READ) || wr->num_sge < 0 ||
		    wr->num_sge > (int)q->cap.max_send_sge) {
			rc = EINVAL;
			break;
		}
		if (cq_room(qp->send_cq) < 1) {
			rc = ENOMEM; /* send queue full: completions not polled */
			break;
		}
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = wr->wr_id;
		wc.qp_num = qp->qp_num;
		wc.opcode = wr->opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_READ;
		if (qp->state == IBV_QPS_ERR)
			wc.status = IBV_WC_WR_FLUSH_ERR;
		else
			wc.status = execute(q, wr, &wc.byte_len);
		if (wc.status != IBV_WC_SUCCESS)
			qp->state = IBV_QPS_ERR; /* an error moves the QP to ERR; later WRs are flushed */
		if (wc.status != IBV_WC_SUCCESS || q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED))
			cq_push(qp->send_cq, &wc);
	}
	pthread_mutex_unlock(&g_lock);
	if (rc != 0 && bad_wr != NULL)
		*bad_wr = wr;
	return rc;
}

static int dbl_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	(void)qp;
	if (bad_wr != NULL)
		*bad_wr = wr;
	return EOPNOTSUPP; /* SEND/RECV is not modelled: only one-sided RDMA */
}

/* Test hook (not in rdma-core): MRs registered and not yet deregistered. */
EXPORT int ibv_double_live_mrs(void)
{
	pthread_mutex_lock(&g_lock);
	int n = (int)g_mr_live;
	pthread_mutex_unlock(&g_lock);
	return n;
}
