# SPDX-License-Identifier: Apache-2.0
"""The JSON-lines channel that the verification session, the timing session and the warm
worker share: what arrives malformed, too long, late or not at all."""

import math
import os
import threading
import time

import pytest

from cuda_agent_harness import channel
from cuda_agent_harness.channel import ChannelClosed, ChannelTimeout, JsonLines, LineReader, MalformedMessage


@pytest.fixture
def pipes():
    """Two pipes, as two processes' ends of a conversation: (here, there)."""
    a_read, b_write = os.pipe()
    b_read, a_write = os.pipe()
    here, there = JsonLines(a_read, a_write), JsonLines(b_read, b_write)
    yield here, there
    here.close()
    there.close()


def test_messages_arrive_whole_and_in_order_even_when_written_in_pieces(pipes):
    here, there = pipes
    there.send({"op": "first", "values": [1, 2.5]})
    line = channel.encode({"op": "second"})
    os.write(there.outgoing, line[:5])
    threading.Timer(0.05, lambda: os.write(there.outgoing, line[5:])).start()
    assert here.receive(1.0) == {"op": "first", "values": [1, 2.5]}
    assert here.receive(1.0) == {"op": "second"}


def test_python_peers_keep_non_finite_numbers_and_the_host_gets_strings(pipes):
    here, there = pipes
    there.send({"time_us": math.nan, "bound": math.inf})
    received = here.receive(1.0)
    assert math.isnan(received["time_us"]) and received["bound"] == math.inf
    assert channel.encode_for_host({"a": [math.nan, -math.inf, 1.0]}) == b'{"a": ["nan", "-inf", 1.0]}\n'


@pytest.mark.parametrize("line, why", [(b"not json\n", "not JSON"), (b"[1, 2]\n", "not an object")])
def test_a_line_that_is_not_a_json_object_is_malformed(pipes, line, why):
    here, there = pipes
    os.write(there.outgoing, line)
    with pytest.raises(MalformedMessage, match=why):
        here.receive(1.0)


def test_a_line_beyond_the_limit_is_refused_before_its_newline_arrives():
    read_end, write_end = os.pipe()
    reader = JsonLines(read_end, write_end, line_limit=1000)
    os.write(write_end, b'{"padding": "' + b"x" * 2000)
    with pytest.raises(MalformedMessage, match="larger than 1000 bytes"):
        reader.receive(1.0)
    reader.close()


def test_silence_is_a_timeout_and_a_closed_end_is_closed(pipes):
    here, there = pipes
    started = time.monotonic()
    with pytest.raises(ChannelTimeout):
        here.receive(0.2)
    assert time.monotonic() - started >= 0.2
    there.send({"op": "last"})
    os.close(there.outgoing)
    there.outgoing = -1
    assert here.receive(1.0) == {"op": "last"}, "what was sent before closing still arrives"
    with pytest.raises(ChannelClosed):
        here.receive(1.0)
    os.close(there.incoming)
    there.incoming = -1
    with pytest.raises(ChannelClosed):  # nobody reads what this side writes any more
        here.send({"op": "to nobody"})


def test_before_the_other_side_opens_its_end_of_a_fifo_end_of_file_is_no_close(tmp_path):
    fifo = tmp_path / "to_me"
    os.mkfifo(fifo)
    incoming = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    _, unused = os.pipe()
    reader = JsonLines(incoming, unused, writer_may_open_late=True)

    def join_late():
        time.sleep(0.2)
        with open(fifo, "wb") as writer:
            writer.write(channel.encode({"op": "hello"}))

    threading.Thread(target=join_late).start()
    assert reader.receive(2.0) == {"op": "hello"}
    with pytest.raises(ChannelClosed):  # it has spoken: now end of file is the end
        reader.receive(1.0)
    reader.close()


def test_a_reader_without_a_total_cap_keeps_reading_over_a_long_life():
    read_end, write_end = os.pipe()
    reader = LineReader(read_end, line_limit=None)
    line = b"y" * 60000 + b"\n"
    received = 0
    for _ in range(40):  # 2.4 MB in all, far beyond any single message
        os.write(write_end, line)
        while len(lines := reader.read_available()) == 0:
            pass
        received += len(lines)
    assert received == 40
    os.close(read_end)
    os.close(write_end)


def test_a_total_cap_drops_what_comes_after_it():
    read_end, write_end = os.pipe()
    reader = LineReader(read_end, line_limit=None, total_limit=10)
    os.write(write_end, b"abc\n")
    assert reader.read_available() == [b"abc"]
    os.write(write_end, b"defghijklmnop\n")
    assert reader.read_available() == []
    os.close(write_end)
    assert reader.read_available() == [] and reader.closed
    os.close(read_end)


def test_a_line_that_end_of_file_cuts_short_is_still_returned():
    read_end, write_end = os.pipe()
    reader = LineReader(read_end)
    os.write(write_end, b'{"op": "last"}')
    assert reader.read_available() == []
    os.close(write_end)
    assert reader.read_available() == [b'{"op": "last"}'] and reader.closed
    os.close(read_end)
