// The public header must compile as C++ (extern "C"), and link.
#include "sdpa.h"
int main() { return sdpa_version() == SDPA_VERSION_NUMBER ? 0 : 1; }
