# Set-up. In Colab: install the book's library (pinned to this edition) and report the device. It adds
# only what Colab lacks and changes none of its packages (the web page's ONNX export is left out).
# Elsewhere (local Jupyter, the book's build, CI) there is nothing to do.
import sys

if "google.colab" in sys.modules:
    import subprocess

    LIBRARY = ("transformer_lib[book] @ "
               "git+https://github.com/transformers-from-scratch/transformers-from-scratch@v0.4.1")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", LIBRARY], check=True)
    import torch

    print("device:", torch.cuda.get_device_name() if torch.cuda.is_available()
          else "CPU (Runtime > Change runtime type > GPU)")
