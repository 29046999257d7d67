"""scripts/bench_nvdiffrec.py's reading of nvdiffrec's output (no GPU, no nvdiffrec): the
first GPU run's PSNR went unread because nvdiffrec prints its validation result as a header
line and a figures line, and writes its AVERAGES line only into a file."""



from diffrec_bench import nvdiffrec_peer as bench_nvdiffrec

LOG = """Base mesh has 5856 triangles and 2930 vertices.
iter=    0, img_loss=0.123456, reg_loss=0.001000, lr=0.03000, time=1000.0 ms, rem=10.00 s
iter=   10, img_loss=0.100000, reg_loss=0.001000, lr=0.02900, time=240.0 ms, rem=9.00 s
iter=   20, img_loss=0.090000, reg_loss=0.001000, lr=0.02800, time=236.0 ms, rem=8.00 s
Running validation
MSE,      PSNR
0.01000000, 20.000
iter=    0, img_loss=0.050000, reg_loss=0.000000, lr=0.00300, time=500.0 ms, rem=5.00 s
iter=   10, img_loss=0.040000, reg_loss=0.000000, lr=0.00290, time=100.0 ms, rem=4.00 s
iter=   20, img_loss=0.030000, reg_loss=0.000000, lr=0.00280, time=97.0 ms, rem=3.00 s
Running validation
MSE,      PSNR
0.00123456, 29.085
PEAK_MEMORY_MB 4910.7
"""


def test_log_gives_each_pass_its_time_the_last_psnr_and_the_peak_memory():
    figures = bench_nvdiffrec.parse_log(LOG.splitlines())
    assert figures == {"pass1_ms": 238.0, "pass2_ms": 98.5, "psnr": 29.085,
                       "peak_memory_mb": 4910.7}
