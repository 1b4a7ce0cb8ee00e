// A minimal JSON value builder: the output is small and flat, not worth a dependency.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mr {

class Json {
   public:
    enum class Kind { Null, Bool, Int, String, Array, Object };

    Json() = default;
    Json(bool v) : kind_(Kind::Bool), bool_(v) {}                    // NOLINT(google-explicit-constructor)
    Json(int v) : kind_(Kind::Int), int_(v) {}                       // NOLINT(google-explicit-constructor)
    Json(int64_t v) : kind_(Kind::Int), int_(v) {}                   // NOLINT(google-explicit-constructor)
    Json(uint64_t v) : kind_(Kind::Int), int_(static_cast<int64_t>(v)) {}  // NOLINT
    Json(const char* v) : kind_(Kind::String), str_(v) {}            // NOLINT(google-explicit-constructor)
    Json(std::string v) : kind_(Kind::String), str_(std::move(v)) {}  // NOLINT(google-explicit-constructor)

    static Json object() {
        Json j;
        j.kind_ = Kind::Object;
        return j;
    }
    static Json array() {
        Json j;
        j.kind_ = Kind::Array;
        return j;
    }

    // Insertion order is kept so the output reads in the order the program worked.
    Json& set(const std::string& key, Json value) {
        kind_ = Kind::Object;
        for (auto& kv : members_) {
            if (kv.first == key) {
                kv.second = std::move(value);
                return *this;
            }
        }
        members_.emplace_back(key, std::move(value));
        return *this;
    }
    Json& push(Json value) {
        kind_ = Kind::Array;
        items_.push_back(std::move(value));
        return *this;
    }

    std::string dump() const {
        std::string out;
        write(out);
        return out;
    }

   private:
    static void quote(std::string& out, const std::string& s) {
        out += '"';
        for (unsigned char c : s) {
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                default:
                    if (c < 0x20) {
                        char buf[8];
                        std::snprintf(buf, sizeof buf, "\\u%04x", c);
                        out += buf;
                    } else {
                        out += static_cast<char>(c);
                    }
            }
        }
        out += '"';
    }

    void write(std::string& out) const {
        switch (kind_) {
            case Kind::Null: out += "null"; break;
            case Kind::Bool: out += bool_ ? "true" : "false"; break;
            case Kind::Int: out += std::to_string(int_); break;
            case Kind::String: quote(out, str_); break;
            case Kind::Array: {
                out += '[';
                for (size_t i = 0; i < items_.size(); ++i) {
                    if (i != 0) out += ", ";
                    items_[i].write(out);
                }
                out += ']';
                break;
            }
            case Kind::Object: {
                out += '{';
                for (size_t i = 0; i < members_.size(); ++i) {
                    if (i != 0) out += ", ";
                    quote(out, members_[i].first);
                    out += ": ";
                    members_[i].second.write(out);
                }
                out += '}';
                break;
            }
        }
    }

    Kind kind_ = Kind::Null;
    bool bool_ = false;
    int64_t int_ = 0;
    std::string str_;
    std::vector<Json> items_;
    std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace mr
