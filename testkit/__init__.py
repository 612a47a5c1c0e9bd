"""Process helpers shared by the tests and the load harness: real redis-servers on loopback
ports, gateway processes, ports held from the moment they are chosen. Not part of the
shipped package."""
