// InlineVector: std::vector's behaviour, with the first N elements inside.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/inline_vector.h"

using kiln::InlineVector;

namespace {

// Counts live instances, so that a test sees every element destroyed once.
struct Counted {
  static inline int live = 0;
  int value = 0;
  Counted(int v = 0) : value(v) { ++live; }  // NOLINT: implicit, as an int
  Counted(const Counted& o) : value(o.value) { ++live; }
  Counted(Counted&& o) noexcept : value(o.value) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) = default;
  ~Counted() { --live; }
  bool operator==(const Counted& o) const { return value == o.value; }
};

template <size_t N>
std::vector<int> values(const InlineVector<Counted, N>& v) {
  std::vector<int> out;
  for (const Counted& c : v) out.push_back(c.value);
  return out;
}

}  // namespace

TEST(InlineVector, KeepsItsFirstElementsInsideAndGrowsOntoTheHeap) {
  InlineVector<int64_t, 2> v;
  const auto* inside = v.data();
  v.push_back(1);
  v.push_back(2);
  EXPECT_EQ(v.data(), inside);
  EXPECT_EQ(v.capacity(), 2u);
  v.push_back(3);
  EXPECT_NE(v.data(), inside);
  EXPECT_EQ(v.vec(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(v.back(), 3);
}

TEST(InlineVector, CopiesAndMovesInlineAndHeapContents) {
  for (size_t n : {2u, 5u}) {  // inline, then on the heap
    {
      InlineVector<Counted, 3> a;
      for (size_t i = 0; i < n; ++i) a.emplace_back(static_cast<int>(i) + 1);
      InlineVector<Counted, 3> copy = a;
      EXPECT_EQ(values(copy), values(a));
      InlineVector<Counted, 3> moved = std::move(a);
      EXPECT_EQ(values(moved), values(copy));
      EXPECT_TRUE(a.empty());  // NOLINT: moved-from is empty by contract
      a = moved;
      EXPECT_EQ(values(a), values(copy));
      moved = std::move(copy);
      EXPECT_EQ(values(moved), values(a));
      EXPECT_TRUE(a == moved);
    }
    EXPECT_EQ(Counted::live, 0) << n << " elements";
  }
}

TEST(InlineVector, AppendsACopyOfItsOwnElementWhileGrowing) {
  InlineVector<std::string, 2> v{"first", "second"};
  v.push_back(v[0]);  // the reference dies with the inline storage
  v.emplace_back(v[2]);
  EXPECT_EQ(v.vec(), (std::vector<std::string>{"first", "second", "first", "first"}));
}

TEST(InlineVector, ResizesAssignsInsertsAndErasesAsStdVector) {
  {
    InlineVector<Counted, 2> v;
    v.resize(4, Counted(7));
    EXPECT_EQ(values(v), (std::vector<int>{7, 7, 7, 7}));
    v.resize(1);
    EXPECT_EQ(values(v), (std::vector<int>{7}));
    v.assign(3, Counted(2));
    EXPECT_EQ(values(v), (std::vector<int>{2, 2, 2}));
    v.insert(v.begin() + 1, Counted(5));
    EXPECT_EQ(values(v), (std::vector<int>{2, 5, 2, 2}));
    v.erase(v.begin(), v.begin() + 2);
    EXPECT_EQ(values(v), (std::vector<int>{2, 2}));
    v.pop_back();
    EXPECT_EQ(values(v), (std::vector<int>{2}));
    v.clear();
    EXPECT_TRUE(v.empty());
  }
  EXPECT_EQ(Counted::live, 0);
  InlineVector<int64_t, 3> w = std::vector<int64_t>{4, 5};
  EXPECT_TRUE(w == (std::vector<int64_t>{4, 5}));
  w.resize(3);
  EXPECT_EQ(w[2], 0);  // value-initialized, as std::vector
}

TEST(InlineVector, AtChecksTheIndex) {
  InlineVector<int, 2> v{1};
  EXPECT_EQ(v.at(0), 1);
  EXPECT_THROW(v.at(1), std::out_of_range);
}
