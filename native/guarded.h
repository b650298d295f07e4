// A value and the mutex that guards it, so that what the lock covers is said
// by the type: the value is reached only through a held lock. No Node.
#pragma once

#include <mutex>

namespace fg {

template <typename T>
class Guarded {
 public:
  // The value while the lock is held (for the life of this object).
  class Access {
   public:
    Access(std::mutex& mutex, T& value) : lock_(mutex), value_(value) {}
    T* operator->() { return &value_; }
    T& operator*() { return value_; }

   private:
    std::lock_guard<std::mutex> lock_;
    T& value_;
  };

  template <typename... Args>
  explicit Guarded(Args&&... args) : value_(std::forward<Args>(args)...) {}

  Access Lock() { return Access(mutex_, value_); }

 private:
  std::mutex mutex_;
  T value_;
};

}  // namespace fg
