// A Fast DDS subscriber with default settings (what RViz gets through rmw_fastrtps without
// tuning: default transports, the kernel's default socket buffers), built against Debian's
// libfastrtps-dev 2.9, for examples/dds_large_messages.rs and tests/dds_transport.rs.
//
//   fastdds_reader TOPIC DDS_TYPE SECONDS EXPECT
//
// Subscribes reliable, keep last 10, volatile, to the DDS topic (rt/...) with the DDS type name;
// keeps each sample as raw CDR, reads the std_msgs/Header stamp that starts every message we
// send, and after SECONDS (or EXPECT samples) prints one JSON line:
//   {"arrived":[{"bytes":N,"latency_s":S},...]}
// latency = arrival (wall clock) - stamp. Prints READY once the reader exists.
// Build: g++ -std=c++17 -O2 fastdds_reader.cpp -o fastdds_reader -lfastrtps -lfastcdr
// Run it only inside a private network namespace.

#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/subscriber/qos/DataReaderQos.hpp>
#include <fastdds/dds/topic/Topic.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include "fastdds_raw.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace eprosima::fastdds::dds;

static double now_s() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s TOPIC DDS_TYPE SECONDS EXPECT\n", argv[0]);
        return 2;
    }
    const std::string topic_name = argv[1], type_name = argv[2];
    const double seconds = std::atof(argv[3]);
    const size_t expect = std::strtoul(argv[4], nullptr, 10);

    auto* factory = DomainParticipantFactory::get_instance();
    DomainParticipant* participant = factory->create_participant(0, PARTICIPANT_QOS_DEFAULT);
    if (!participant) return 1;
    TypeSupport type(new RawType(type_name));
    type.register_type(participant);
    Topic* topic = participant->create_topic(topic_name, type_name, TOPIC_QOS_DEFAULT);
    Subscriber* subscriber = participant->create_subscriber(SUBSCRIBER_QOS_DEFAULT);
    DataReaderQos qos = DATAREADER_QOS_DEFAULT;
    reliable_volatile_last10(qos);
    DataReader* reader = subscriber->create_datareader(topic, qos);
    if (!topic || !subscriber || !reader) return 1;
    std::printf("READY\n");
    std::fflush(stdout);

    std::string arrived;
    size_t count = 0;
    const double start = now_s();
    Raw sample;
    SampleInfo info;
    while (now_s() - start < seconds && (expect == 0 || count < expect)) {
        while (reader->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK) {
            if (!info.valid_data || sample.bytes.size() < 12) continue;
            const double t = now_s();
            int32_t sec;
            uint32_t nanosec;
            std::memcpy(&sec, sample.bytes.data() + 4, 4);
            std::memcpy(&nanosec, sample.bytes.data() + 8, 4);
            char entry[96];
            std::snprintf(entry, sizeof entry, "%s{\"bytes\":%zu,\"latency_s\":%.6f}", count ? "," : "",
                          sample.bytes.size(), t - (sec + nanosec * 1e-9));
            arrived += entry;
            ++count;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::printf("{\"arrived\":[%s]}\n", arrived.c_str());
    std::fflush(stdout);
    participant->delete_contained_entities();
    factory->delete_participant(participant);
    return 0;
}
