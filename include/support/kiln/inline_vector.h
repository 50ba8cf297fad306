// A vector that keeps its first N elements inside itself and goes to the
// heap only beyond them. Trace ops (their sizes, views and node lists) are
// built on every recorded op; with std::vector each of those lists was a
// heap allocation (23.5 per recorded op against eager CPU's 9; 9.4 with
// these). The core has no torch or LLVM, so neither one's SmallVector is
// available here.
//
// The subset of std::vector's interface that kiln uses; iterators are
// pointers. Moving a vector whose elements are inline moves them one by one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

template <class T, size_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector keeps at least one element inline");
  static_assert(std::is_nothrow_move_constructible_v<T>, "moves (and growth) must not throw");

 public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  InlineVector() = default;
  InlineVector(size_t n, const T& value) { assign(n, value); }
  explicit InlineVector(size_t n) { resize(n); }
  InlineVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  InlineVector(It first, It last) {
    assign(first, last);
  }
  InlineVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit, as a copy
  InlineVector(const InlineVector& other) { assign(other.begin(), other.end()); }
  InlineVector(InlineVector&& other) noexcept { take(std::move(other)); }
  ~InlineVector() { release(); }

  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      release();
      take(std::move(other));
    }
    return *this;
  }
  InlineVector& operator=(std::initializer_list<T> init) {
    assign(init.begin(), init.end());
    return *this;
  }
  InlineVector& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }

  // A std::vector copy, for interfaces that take one (explicit, so that no
  // copy hides in a call).
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    check(i);
    return data_[i];
  }
  const T& at(size_t i) const {
    check(i);
    return data_[i];
  }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      // `args` may refer to an element: build the new one before moving.
      T value(std::forward<Args>(args)...);
      grow_to(capacity_ * 2);
      ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    } else {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void pop_back() { std::destroy_at(data_ + --size_); }
  void resize(size_t n) {
    if (n > capacity_) grow_to(std::max(n, 2 * capacity_));
    if (n < size_) std::destroy(begin() + n, end());
    else std::uninitialized_value_construct(end(), begin() + n);
    size_ = n;
  }
  void resize(size_t n, const T& value) {
    if (n <= size_) {
      resize(n);
      return;
    }
    const T copy = value;  // `value` may be an element
    if (n > capacity_) grow_to(std::max(n, 2 * capacity_));
    std::uninitialized_fill(end(), begin() + n, copy);
    size_ = n;
  }
  void assign(size_t n, const T& value) {
    const T copy = value;
    clear();
    resize(n, copy);
  }
  template <class It>  // forward iterators: the range is measured, then copied
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) {
      ::new (static_cast<void*>(data_ + size_)) T(*first);
      ++size_;  // after the element exists: a throwing copy leaves only built ones
    }
  }
  T* insert(const T* pos, const T& value) {
    const size_t at = static_cast<size_t>(pos - data_);
    emplace_back(value);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  T* erase(const T* pos) { return erase(pos, pos + 1); }
  T* erase(const T* first, const T* last) {
    if (first == last) return begin() + (first - data_);
    T* f = begin() + (first - data_);
    T* l = begin() + (last - data_);
    T* new_end = std::move(l, end(), f);
    std::destroy(new_end, end());
    size_ -= static_cast<size_t>(l - f);
    return f;
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const InlineVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool is_inline() const { return data_ == inline_data(); }
  T* inline_data() { return reinterpret_cast<T*>(inline_); }
  const T* inline_data() const { return reinterpret_cast<const T*>(inline_); }

  void check(size_t i) const {
    if (i >= size_) throw std::out_of_range("InlineVector::at: index past the end");
  }

  void grow_to(size_t n) {
    T* bigger = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    std::uninitialized_move(begin(), end(), bigger);
    std::destroy(begin(), end());
    if (!is_inline()) ::operator delete(data_, std::align_val_t(alignof(T)));
    data_ = bigger;
    capacity_ = n;
  }
  void release() {
    std::destroy(begin(), end());
    if (!is_inline()) ::operator delete(data_, std::align_val_t(alignof(T)));
    data_ = inline_data();
    size_ = 0;
    capacity_ = N;
  }
  // Leaves `other` empty (inline). Expects this one released.
  void take(InlineVector&& other) {
    if (other.is_inline()) {
      data_ = inline_data();
      std::uninitialized_move(other.begin(), other.end(), data_);
      size_ = other.size_;
      other.clear();
    } else {
      data_ = other.data_;
      size_ = other.size_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_data();
      other.size_ = 0;
      other.capacity_ = N;
    }
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = inline_data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace kiln
