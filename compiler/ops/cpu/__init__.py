"""Templates for the ``cpu`` target: host kernels written in the same IR, rendered by ``compiler.codegen.cpp``.

Each module is one template (``space(spec, device, level)`` and ``build(spec, schedule) -> Program``)
for one operator, reading the host's description (``compiler.cpu_device.CpuDevice``): vector width,
cores, cache sizes. Modules here define no ``OPERATOR``; the operators of ``compiler.ops`` list them.
"""
