"""The hermetic dispatch self-test of the sparse-MLA patch (no GPU needed).

It imports the real, patched sglang module and the real flashinfer Python
dispatch, and replaces only flashinfer's compiled kernels (and sglang's Triton
kernel) with emulators that enforce the C++ launchers' acceptance rules, read
from the installed wheel's own csrc/ files. The census then drives every shape
DeepSeek-V4-Flash + DSpark produces through it and counts where each lands.

Run in the image build (`python -m sm12x.selftest`) and by tests/patch/.
"""
