# pylayer pip guard: first on PYTHONPATH so that `python3 -m pip` and
# `import pip` explain how to get packages instead of installing anything.
raise ImportError(
    "pip is disabled in this sandbox: packages come from pylayer layers. "
    "Ask for more packages through the pylayer broker "
    "(POST /v1/sessions/{id}/requests); once the request is approved the "
    "packages are mounted in your next run.",
    name="pip",
)
