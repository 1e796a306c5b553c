// A ROS 2 service client as rmw_fastrtps (the ROS 2 default RMW) frames one, on Debian's
// libfastrtps-dev 2.9, for tests/node_services_fastdds.rs.
//
//   fastdds_requester SECONDS SERVICE REQUEST_TYPE REPLY_TYPE HEX [SERVICE REQUEST_TYPE REPLY_TYPE HEX]...
//
// For each group, in order: a request writer on rq<SERVICE>Request and a reply reader on
// rr<SERVICE>Reply (reliable, volatile, keep last 10: the services' default QoS), waits until both
// are matched, writes HEX (the request's CDR, encapsulation header included) with the reply
// reader's GUID as related sample identity in inline QoS, and takes the reply whose related
// sample identity names this request. The request's payload carries no header (the "enhanced"
// RPC-over-DDS mapping). With LATE_READER_S set, each reply reader is made disabled (its GUID is
// fixed at creation) and enabled, which announces it, that many seconds after the request: a
// client whose reply reader the server discovers only after the request. Prints one JSON line:
//   {"replies":[{"service":S,"hex":H},...]}     (H empty when no reply came within SECONDS)
// The DDS domain is ROS_DOMAIN_ID (0 if unset). Run it only inside a private network namespace.

#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/topic/Topic.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include "fastdds_raw.hpp"
#include <fastdds/rtps/common/WriteParams.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace eprosima::fastdds::dds;
using eprosima::fastrtps::rtps::WriteParams;

static double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

static std::vector<uint8_t> from_hex(const std::string& hex) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

static std::string to_hex(const std::vector<uint8_t>& bytes) {
    std::string out;
    char b[3];
    for (uint8_t v : bytes) {
        std::snprintf(b, sizeof b, "%02x", v);
        out += b;
    }
    return out;
}

static Topic* topic_of(DomainParticipant* p, const std::string& name, const std::string& type_name) {
    TypeSupport type(new RawType(type_name));
    type.register_type(p);
    return p->create_topic(name, type_name, TOPIC_QOS_DEFAULT);
}

// One call: the request written once both ends are matched (the request writer alone when the
// reader comes late), the reply to it taken (hex), or "".
static std::string call(DomainParticipant* p, double deadline, double late, const std::string& service,
                        const std::string& req_type, const std::string& rep_type, const std::string& hex) {
    Topic* rq = topic_of(p, "rq" + service + "Request", req_type);
    Topic* rr = topic_of(p, "rr" + service + "Reply", rep_type);
    Publisher* pub = p->create_publisher(PUBLISHER_QOS_DEFAULT);
    SubscriberQos sqos = SUBSCRIBER_QOS_DEFAULT;
    sqos.entity_factory().autoenable_created_entities = late <= 0;
    Subscriber* sub = p->create_subscriber(sqos);
    if (!rq || !rr || !pub || !sub) return "";
    DataWriterQos wq = DATAWRITER_QOS_DEFAULT;
    reliable_volatile_last10(wq);
    DataReaderQos rqos = DATAREADER_QOS_DEFAULT;
    reliable_volatile_last10(rqos);
    DataWriter* writer = pub->create_datawriter(rq, wq);
    DataReader* reader = sub->create_datareader(rr, rqos);
    if (!writer || !reader) return "";
    PublicationMatchedStatus pm;
    SubscriptionMatchedStatus sm;
    while (now_s() < deadline) {
        writer->get_publication_matched_status(pm);
        reader->get_subscription_matched_status(sm);
        if (pm.current_count > 0 && (late > 0 || sm.current_count > 0)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reader->guid() == eprosima::fastrtps::rtps::GUID_t::unknown()) {
        std::fprintf(stderr, "the reply reader has no GUID yet\n");
        return "";
    }
    Raw request{from_hex(hex)};
    WriteParams params;
    params.related_sample_identity().writer_guid() = reader->guid();
    if (!writer->write(&request, params)) return "";
    const auto sent = params.sample_identity();
    if (late > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(late));
        if (reader->enable() != ReturnCode_t::RETCODE_OK) return "";
    }
    Raw reply;
    SampleInfo info;
    while (now_s() < deadline) {
        while (reader->take_next_sample(&reply, &info) == ReturnCode_t::RETCODE_OK) {
            const auto& rel = info.related_sample_identity;
            const bool ours = rel.writer_guid() == reader->guid() || rel.writer_guid() == writer->guid();
            if (info.valid_data && ours && rel.sequence_number() == sent.sequence_number()) return to_hex(reply.bytes);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return "";
}

int main(int argc, char** argv) {
    if (argc < 6 || (argc - 2) % 4 != 0) {
        std::fprintf(stderr, "usage: %s SECONDS SERVICE REQUEST_TYPE REPLY_TYPE HEX [...]\n", argv[0]);
        return 2;
    }
    const double deadline = now_s() + std::atof(argv[1]);
    const char* late_env = std::getenv("LATE_READER_S");
    const double late = late_env ? std::atof(late_env) : 0.0;
    const char* domain = std::getenv("ROS_DOMAIN_ID");
    auto* factory = DomainParticipantFactory::get_instance();
    DomainParticipant* participant = factory->create_participant(domain ? std::atoi(domain) : 0, PARTICIPANT_QOS_DEFAULT);
    if (!participant) return 1;
    std::string out;
    for (int i = 2; i + 3 < argc; i += 4) {
        const std::string hex = call(participant, deadline, late, argv[i], argv[i + 1], argv[i + 2], argv[i + 3]);
        out += std::string(out.empty() ? "" : ",") + "{\"service\":\"" + argv[i] + "\",\"hex\":\"" + hex + "\"}";
    }
    std::printf("{\"replies\":[%s]}\n", out.c_str());
    std::fflush(stdout);
    participant->delete_contained_entities();
    factory->delete_participant(participant);
    return 0;
}
