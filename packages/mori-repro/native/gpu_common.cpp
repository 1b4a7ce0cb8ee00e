#include <sys/types.h>
#include <unistd.h>

#include "gpu.hpp"

namespace mr {

uint64_t fd_object_size(int fd) {
    // dma-buf implements SEEK_END as "size of the buffer"; the position is irrelevant afterwards
    // because nothing reads through this fd.
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return 0;
    lseek(fd, 0, SEEK_SET);
    return static_cast<uint64_t>(end);
}

}  // namespace mr
