"""Build configuration beyond pyproject.toml: pulllog's optional C accelerators.

``pulllog.net._cproduce`` decodes the broker's Produce requests and encodes its answers
(``pulllog.net.produce`` and ``pulllog.net.protocol`` keep the Python code it must agree with;
``tests/net/test_net_cproduce.py`` fails where a compiler did not build it, unless
PULLLOG_NO_EXTENSIONS=1 is set). ``pulllog.log._clog`` checks a Produce request's batches
before the append (``Log.validate`` keeps the Python rules; ``tests/log/test_clog.py``).
``pulllog.records._crecords`` decodes record batches for the consumer and encodes records
into the producer's batches. It is optional: where no C compiler is found the build goes on
without it and ``pulllog.records.decoding`` / ``pulllog.records.encoding`` use their
pure-Python code (``tests/records/test_decoding.py`` and ``test_encoding.py`` fail on a
machine with a compiler that did not build it, unless PULLLOG_NO_EXTENSIONS=1 is set).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pulllog.records._crecords",
            sources=["src/pulllog/records/_crecords.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "pulllog.log._clog",
            sources=["src/pulllog/log/_clog.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "pulllog.net._cproduce",
            sources=["src/pulllog/net/_cproduce.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
)
