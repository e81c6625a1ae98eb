#include <iostream>

#include "kiln/kiln.h"

int main() {
  std::cout << "kiln\n";
  return 0;
}
