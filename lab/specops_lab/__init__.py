"""The lab: what exercises specops without a GPU or a cluster of our own.

The simulated vLLM engine and its truths, the benchmark, the demo, the local control plane,
the pod runner and the load generator. None of it runs in a customer's cluster, and nothing
in ``specops``, the operator or the sidecar imports it."""
