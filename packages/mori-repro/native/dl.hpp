// Run-time loading of vendor libraries: the program must start on nodes that lack some of them,
// so nothing here is linked at build time.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace mr {

class Library {
   public:
    Library() = default;
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;
    Library(Library&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}
    Library& operator=(Library&& other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(path_, other.path_);
        return *this;
    }
    // Libraries stay loaded until exit: providers and runtimes keep threads and atexit handlers.
    ~Library() = default;

    // Opens `env_var`'s path when set (tests point it at the doubles), else the default soname.
    bool open(const char* env_var, const char* default_name, std::string* error) {
        const char* override_path = std::getenv(env_var);
        path_ = (override_path != nullptr && *override_path != '\0') ? override_path : default_name;
        handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle_ == nullptr) {
            const char* why = dlerror();
            *error = why != nullptr ? why : "dlopen failed";
            return false;
        }
        return true;
    }

    bool loaded() const { return handle_ != nullptr; }
    const std::string& path() const { return path_; }

    template <typename Fn>
    bool sym(const char* name, Fn* out) const {
        *out = reinterpret_cast<Fn>(dlsym(handle_, name));
        return *out != nullptr;
    }

   private:
    void* handle_ = nullptr;
    std::string path_;
};

}  // namespace mr
