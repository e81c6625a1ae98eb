// Index expressions (index_expr.h): every operation ends in canonicalize().
#include "compiler/lower/index_expr.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln::compiler::lower {

IndexExpr::IndexExpr(int64_t constant) {
  if (constant != 0) terms_.push_back({constant, {}});
}

IndexExpr IndexExpr::symbol(const std::string& name) {
  IndexExpr e;
  e.terms_.push_back({1, {name}});
  return e;
}

void IndexExpr::canonicalize() {
  for (IndexTerm& t : terms_) std::sort(t.symbols.begin(), t.symbols.end());
  // Constant last, then by symbols: "i0 + i1 + 3" reads naturally.
  std::sort(terms_.begin(), terms_.end(), [](const IndexTerm& a, const IndexTerm& b) {
    if (a.symbols.empty() != b.symbols.empty()) return b.symbols.empty();
    return a.symbols < b.symbols;
  });
  std::vector<IndexTerm> merged;
  for (IndexTerm& t : terms_) {
    if (!merged.empty() && merged.back().symbols == t.symbols) merged.back().coeff += t.coeff;
    else merged.push_back(std::move(t));
  }
  std::erase_if(merged, [](const IndexTerm& t) { return t.coeff == 0; });
  terms_ = std::move(merged);
}

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr r = a;
  r.terms_.insert(r.terms_.end(), b.terms_.begin(), b.terms_.end());
  r.canonicalize();
  return r;
}

IndexExpr operator-(const IndexExpr& a, const IndexExpr& b) { return a + IndexExpr(-1) * b; }

IndexExpr operator*(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr r;
  for (const IndexTerm& x : a.terms_)
    for (const IndexTerm& y : b.terms_) {
      IndexTerm t{x.coeff * y.coeff, x.symbols};
      t.symbols.insert(t.symbols.end(), y.symbols.begin(), y.symbols.end());
      r.terms_.push_back(std::move(t));
    }
  r.canonicalize();
  return r;
}

std::optional<int64_t> IndexExpr::constant() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1 && terms_[0].symbols.empty()) return terms_[0].coeff;
  return std::nullopt;
}

bool IndexExpr::uses(const std::string& symbol) const {
  for (const IndexTerm& t : terms_)
    if (std::find(t.symbols.begin(), t.symbols.end(), symbol) != t.symbols.end()) return true;
  return false;
}

std::optional<int64_t> IndexExpr::stride_of(const std::string& symbol) const {
  int64_t c = 0;
  for (const IndexTerm& t : terms_) {
    auto n = std::count(t.symbols.begin(), t.symbols.end(), symbol);
    if (n == 0) continue;
    if (n > 1 || t.symbols.size() != 1) return std::nullopt;
    c += t.coeff;
  }
  return c;
}

std::optional<IndexExpr> IndexExpr::coefficient_of(const std::string& symbol) const {
  IndexExpr c;
  for (const IndexTerm& t : terms_) {
    auto n = std::count(t.symbols.begin(), t.symbols.end(), symbol);
    if (n == 0) continue;
    if (n > 1) return std::nullopt;
    IndexTerm rest = t;
    rest.symbols.erase(std::find(rest.symbols.begin(), rest.symbols.end(), symbol));
    c.terms_.push_back(std::move(rest));
  }
  c.canonicalize();
  return c;
}

IndexExpr IndexExpr::substitute(const std::map<std::string, IndexExpr>& with) const {
  IndexExpr r;
  for (const IndexTerm& t : terms_) {
    IndexExpr term(t.coeff);
    for (const std::string& s : t.symbols) {
      auto it = with.find(s);
      term = term * (it != with.end() ? it->second : symbol(s));
    }
    r = r + term;
  }
  return r;
}

int64_t IndexExpr::eval(const std::map<std::string, int64_t>& values) const {
  int64_t sum = 0;
  for (const IndexTerm& t : terms_) {
    int64_t v = t.coeff;
    for (const std::string& s : t.symbols) {
      auto it = values.find(s);
      KILN_CHECK(it != values.end(), "index expression ", str(), ": no value for symbol ", s);
      v *= it->second;
    }
    sum += v;
  }
  return sum;
}

std::string IndexExpr::str() const {
  if (terms_.empty()) return "0";
  std::string s;
  for (size_t k = 0; k < terms_.size(); ++k) {
    const IndexTerm& t = terms_[k];
    int64_t c = t.coeff;
    if (k > 0) {
      s += c < 0 ? " - " : " + ";
      c = c < 0 ? -c : c;
    } else if (c < 0 && !t.symbols.empty()) {
      s += "-";
      c = -c;
    }
    std::string product;
    if (c != 1 || t.symbols.empty()) product = std::to_string(c);
    for (const std::string& sym : t.symbols) product += (product.empty() ? "" : "*") + sym;
    s += product;
  }
  return s;
}

IndexExpr flat_index(const std::vector<IndexExpr>& coords, const std::vector<IndexExpr>& sizes) {
  KILN_ASSERT(coords.size() == sizes.size(), "flat_index: ", coords.size(), " coordinates for ", sizes.size(),
              " sizes");
  IndexExpr flat, stride(1);
  for (size_t k = coords.size(); k-- > 0;) {
    flat = flat + coords[k] * stride;
    stride = stride * sizes[k];
  }
  return flat;
}

IndexExpr product(const std::vector<IndexExpr>& sizes) {
  IndexExpr n(1);
  for (const IndexExpr& s : sizes) n = n * s;
  return n;
}

}  // namespace kiln::compiler::lower
