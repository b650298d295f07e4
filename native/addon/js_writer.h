// Builds JS values with raw Node-API calls that never throw. Once a call
// fails - the environment is shutting down (a worker being terminated) and
// can no longer run JS - every later call is skipped and ok() is false.
// node-addon-api would turn that failure into a C++ exception whose own
// construction then needs JS and aborts the process; code that runs from
// libuv (poll callbacks, thread-pool completions) must use this instead.
#pragma once

#include <node_api.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace fg::addon {

class JsWriter {
 public:
  explicit JsWriter(napi_env env) : env_(env) {}

  napi_env env() const { return env_; }
  bool ok() const { return ok_; }

  napi_value Object() {
    return Make([&](napi_value* out) { return napi_create_object(env_, out); });
  }
  napi_value Array(size_t length) {
    return Make([&](napi_value* out) { return napi_create_array_with_length(env_, length, out); });
  }
  napi_value String(const std::string& text) {
    return Make([&](napi_value* out) {
      return napi_create_string_utf8(env_, text.data(), text.size(), out);
    });
  }
  napi_value Number(double value) {
    return Make([&](napi_value* out) { return napi_create_double(env_, value, out); });
  }
  napi_value Boolean(bool value) {
    return Make([&](napi_value* out) { return napi_get_boolean(env_, value, out); });
  }
  napi_value Null() {
    return Make([&](napi_value* out) { return napi_get_null(env_, out); });
  }

  // `key` is a string literal: its JS string is made once per writer (a batch
  // of items sets the same few dozen keys on every object).
  void Set(napi_value object, const char* key, napi_value value) {
    if (!ok_ || !object || !value) return;
    napi_value& name = keys_[key];
    if (!name) Check(napi_create_string_utf8(env_, key, NAPI_AUTO_LENGTH, &name));
    if (ok_) Check(napi_set_property(env_, object, name, value));
  }
  void Set(napi_value object, const char* key, const std::string& value) {
    Set(object, key, String(value));
  }
  void Set(napi_value object, const char* key, const char* value) {
    Set(object, key, String(value));
  }
  void Set(napi_value object, const char* key, bool value) { Set(object, key, Boolean(value)); }
  void Set(napi_value object, const char* key, double value) { Set(object, key, Number(value)); }
  void Set(napi_value object, const char* key, int64_t value) {
    Set(object, key, Number(static_cast<double>(value)));
  }
  void Set(napi_value object, const char* key, uint64_t value) {
    Set(object, key, Number(static_cast<double>(value)));
  }
  void Set(napi_value object, const char* key, int32_t value) {
    Set(object, key, static_cast<int64_t>(value));
  }
  void Set(napi_value object, const char* key, uint32_t value) {
    Set(object, key, static_cast<uint64_t>(value));
  }
  void SetIndex(napi_value array, uint32_t index, napi_value value) {
    if (ok_ && array && value) Check(napi_set_element(env_, array, index, value));
  }

 private:
  template <typename Create>
  napi_value Make(Create create) {
    napi_value value = nullptr;
    if (ok_) Check(create(&value));
    return ok_ ? value : nullptr;
  }
  void Check(napi_status status) {
    if (status != napi_ok) ok_ = false;
  }

  napi_env env_;
  bool ok_ = true;
  std::unordered_map<const char*, napi_value> keys_;
};

}  // namespace fg::addon
