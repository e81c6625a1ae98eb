// Index expressions of the loop IR (docs/loop-ir.md): integer polynomials
// over named symbols, the loop variables (i0, r1...) and the symbolic batch
// size s0, kept in one canonical form so that simplification is the
// constructor's job.
//
// An index is a sum of terms coeff * (product of symbols). Every operation
// returns the canonical form: terms sorted by their symbols, equal products
// merged, zero coefficients dropped, so constant folding (2*3 -> 6), merging
// (i0*4 + i0*2 -> 6*i0) and dropping *0 and +0 happen as a matter of course,
// and two indices are equal exactly when their printed forms are. Loads of
// views are affine in the loop variables; a stride may carry s0 (the
// contiguous strides of f32[s0, 3, h] are 3*h and h, those of f32[3, s0] s0
// and 1), which is why products of symbols are allowed at all.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler::lower {

struct IndexTerm {
  int64_t coeff = 0;
  std::vector<std::string> symbols;  // sorted; empty: the constant term
  bool operator==(const IndexTerm&) const = default;
};

class IndexExpr {
 public:
  IndexExpr() = default;  // 0
  IndexExpr(int64_t constant);  // NOLINT: an integer is an index
  static IndexExpr symbol(const std::string& name);

  friend IndexExpr operator+(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator-(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator*(const IndexExpr& a, const IndexExpr& b);
  bool operator==(const IndexExpr&) const = default;

  const std::vector<IndexTerm>& terms() const { return terms_; }
  bool is_constant() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].symbols.empty()); }
  std::optional<int64_t> constant() const;
  bool uses(const std::string& symbol) const;
  // The coefficient of `symbol` when the index is c * symbol + (terms
  // without it) with an integer c (0 when it does not appear); nullopt when
  // the symbol's coefficient involves other symbols.
  std::optional<int64_t> stride_of(const std::string& symbol) const;
  // The index c when the index is c * symbol + (terms without it), c free
  // of the symbol (0 when it does not appear); nullopt when not linear in it.
  std::optional<IndexExpr> coefficient_of(const std::string& symbol) const;
  // Each named symbol replaced by an index (the rest kept).
  IndexExpr substitute(const std::map<std::string, IndexExpr>& with) const;
  // The value with every symbol bound (kiln::Error naming an unbound one).
  int64_t eval(const std::map<std::string, int64_t>& values) const;
  // "6*i0 + i1 + 3", "0"; C and the printer read it alike.
  std::string str() const;

 private:
  void canonicalize();
  std::vector<IndexTerm> terms_;
};

// The row-major flat offset of `coords` in a contiguous array of `sizes`.
IndexExpr flat_index(const std::vector<IndexExpr>& coords, const std::vector<IndexExpr>& sizes);
// The product of the sizes (the number of elements).
IndexExpr product(const std::vector<IndexExpr>& sizes);

}  // namespace kiln::compiler::lower
