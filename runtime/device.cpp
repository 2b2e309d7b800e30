// Buffer lifetime and tracked allocation.
#include "runtime/device.h"

#include <utility>

#include "runtime/status.h"

namespace zt {

Buffer::Buffer(Buffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) device_->release(data_, bytes_, category_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Buffer Device::alloc(size_t bytes, MemCategory category) {
  if (bytes == 0) return Buffer();
  void* data = raw_alloc(bytes);
  memory_.on_alloc(category, bytes);
  return Buffer(this, data, bytes, category);
}

Buffer Device::alloc_zeroed(size_t bytes, MemCategory category) {
  Buffer b = alloc(bytes, category);
  if (b) zero(b.data(), bytes);
  return b;
}

void Device::release(void* data, size_t bytes, MemCategory category) {
  memory_.on_free(category, bytes);
  raw_free(data, bytes);
}

}  // namespace zt
