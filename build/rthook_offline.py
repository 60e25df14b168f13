# PyInstaller runtime hook: runs before pms or the GUI starts.
# The packaged app carries its embedding model, so nothing may ever reach the
# Hugging Face Hub: offline mode makes any accidental download attempt fail at
# once instead of waiting on the network.
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
# ONNX Runtime reports usage to Microsoft unless this is set before it starts
# (pms.Embedder sets it too; the hook covers anything that loads it earlier).
os.environ["ORT_DISABLE_TELEMETRY"] = "1"
